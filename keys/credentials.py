"""The authenticated caller, as every later step of the pipeline sees it."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from ipaddress import IPv4Network, IPv6Network
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from accounts.snapshots import AccountSnapshot
    from groups.snapshots import GroupSnapshot

# Calling models spends the account's money: a token needs this scope for every billed endpoint.
SCOPE_MODELS_INVOKE = "models:invoke"
# Staff automation: the /v1/admin provisioning API (docs/authentication.md). Only ever issued to a
# staff user's token, never through the OAuth consent flow (keys/scopes.py), and checked at each use.
SCOPE_ADMIN_PROVISION = "admin:provision"
STAFF_ONLY_SCOPES = frozenset({SCOPE_ADMIN_PROVISION})

# Every scope an OAuth token can hold; a manual API key acts for its own account in full.
SCOPES = {
    "profile:read": "Read your user profile",
    "account:read": "Read your account, current group and allowed groups",
    "account:balance:read": "Read your balance",
    SCOPE_MODELS_INVOKE: "Call models for you in your allowed groups (charged to your account)",
    SCOPE_ADMIN_PROVISION: "Staff only: create accounts and keys, top up wallets, read usage",
}


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """An API key's own limits (keys.models.ApiKey), as every later step reads them; each None or
    empty when unset. `allowed_networks` are `allowed_ips` parsed once, when the key is read."""

    budget: Decimal | None = None
    budget_period: str = ""
    model_ids: frozenset[str] = frozenset()
    rpm: int | None = None
    tpm: int | None = None
    allowed_networks: tuple[IPv4Network | IPv6Network, ...] = ()


NO_KEY_LIMITS = KeyLimits()


@dataclass(frozen=True)
class Credential:
    """A verified API key or OAuth access token.

    kind: "api_key" or "oauth"; id: the ApiKey / AccessToken primary key. "console" is the signed-in
    user of the web console (id: the Account's primary key), acting in the group of the model chosen.
    bound_group: the key's group (API keys); None for OAuth tokens, which act in the account's
    current group unless the request selects another with `<group_id>:<model>`.
    scopes: the token's scopes; empty for API keys (which are not scope-limited).

    The groups the account may use are `account.allowed_group_ids`, read with the key or token (and
    cached with it: any change to them is seen at the next request).

    `account` and `bound_group` are immutable snapshots, shared with the per-process credential cache
    (keys/selectors.py); what they do not hold (the wallet, the profile) is read by id.
    """

    kind: Literal["api_key", "oauth", "console"]
    id: int
    account: AccountSnapshot
    bound_group: GroupSnapshot | None
    scopes: frozenset[str] = frozenset()
    label: str = ""
    # An API key's public display prefix (`sk-abc12345`, as the console shows it); never the secret.
    prefix: str = ""
    # An API key's own limits; OAuth tokens and the console carry none.
    limits: KeyLimits = NO_KEY_LIMITS

    @property
    def api_key_id(self) -> int | None:
        """The ApiKey's primary key, for an API key; None for other credentials."""
        return self.id if self.kind == "api_key" else None

    @property
    def limit_key(self) -> str:
        """Stable string naming this credential, for rate/concurrency counters and usage records."""
        return f"{self.kind}:{self.id}"

    @property
    def log_name(self) -> str:
        """How logs name this credential: an API key by its display prefix, a token by its id."""
        if self.kind == "api_key" and self.prefix:
            return f"{self.prefix}…"
        return self.limit_key

    def has_scope(self, scope: str) -> bool:
        return self.kind in ("api_key", "console") or scope in self.scopes
