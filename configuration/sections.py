"""The configuration file's sections: one declared entry model and one apply function each.

An entry model says which keys a `[[section]]` table may hold, their types, defaults and limits
(derived from the columns they land in, configuration/columns.py), which keys are unique within the
file, and the rules that look at other entries or the database (`problems`). The apply function writes
the section's valid entries through the owning app's services and reports what each one did. A new
section is a new model, a new apply function and a line in `SECTIONS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field

from accounts.models import Account, User
from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import Subscription, Wallet
from billing.subscriptions import subscription_upsert
from chat.models import TextModel
from chat.services import text_model_upsert
from configuration.columns import NonEmptyStrings, column
from groups.models import Group
from groups.services import group_upsert
from images.capabilities import validate_capabilities
from images.models import ImageModel
from images.services import image_model_upsert
from upstreams.models import Upstream
from upstreams.services import UPSTREAM_RETRY_FIELDS, upstream_upsert

ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
USERNAME = re.compile(r"[\w.@+-]+")


class Entry(BaseModel):
    """One `[[section]]` table: strict types (TOML has its own), no key outside the declaration."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # The key that names an entry in messages, e.g. models[2] (alpha-image-2).
    label_key: ClassVar[str | None] = None
    # Keys (or tuples of keys) no two entries of the file may share.
    unique: ClassVar[tuple[str | tuple[str, ...], ...]] = ()

    @classmethod
    def label(cls, raw: dict[str, Any]) -> str | None:
        value = raw.get(cls.label_key) if cls.label_key else None
        return str(value) if isinstance(value, str | int) else None

    def problems(self, config: ConfigFile) -> list[str]:
        """What is wrong given the other entries and the database; empty when nothing is."""
        return []


@dataclass
class ConfigFile:
    """The file's valid entries by section, and the names known to the file or the database."""

    entries: dict[str, list[Entry]]

    @cached_property
    def upstream_kinds(self) -> dict[str, str]:
        """Each upstream's kind once the file is applied: the file's, else the database's."""
        return dict(Upstream.objects.values_list("name", "kind")) | {
            e.name: e.kind for e in self.entries["upstreams"]
        }

    @cached_property
    def upstream_names(self) -> set[str]:
        return set(self.upstream_kinds)

    @cached_property
    def group_billing(self) -> dict[str, str]:
        return dict(Group.objects.values_list("name", "billing")) | {
            e.name: e.billing for e in self.entries["groups"]
        }

    @cached_property
    def usernames(self) -> set[str]:
        return {e.username for e in self.entries["accounts"]} | set(
            Account.objects.values_list("user__username", flat=True)
        )

    def group_image_models(self, group: str) -> set[str]:
        """The group's image model ids once the file is applied (nothing is deleted)."""
        return {e.id for e in self.entries["models"] if e.group == group} | set(
            ImageModel.objects.filter(group__name=group).values_list("model_id", flat=True)
        )

    def group_text_models(self, group: str, *, in_file: bool = True) -> set[str]:
        """The group's text model ids once the file is applied; `in_file=False`: those the
        database holds and the file does not name."""
        in_database = set(TextModel.objects.filter(group__name=group).values_list("model_id", flat=True))
        named = {e.id for e in self.entries["text_models"] if e.group == group}
        return (in_database | named) if in_file else (in_database - named)

    def group_models(self, group: str) -> set[str]:
        """Every model id of the group, image and text, once the file is applied."""
        return self.group_image_models(group) | self.group_text_models(group)


def _undefined(what: str, name: str) -> str:
    return f"{what} {name!r} is not defined in the file or the database"


# --- [[upstreams]] ----------------------------------------------------------------------------------


class UpstreamEntry(Entry):
    label_key = "name"
    unique = ("name",)

    name: column(Upstream, "name")
    kind: column(Upstream, "kind")
    base_url: column(Upstream, "base_url") = ""
    api_key_env: column(Upstream, "api_key_env", pattern=ENV_NAME, hint="an environment variable name") = ""
    timeout_seconds: column(Upstream, "timeout_seconds") = 120
    priority: column(Upstream, "priority") = 0
    weight: column(Upstream, "weight") = 1
    enabled: column(Upstream, "enabled") = True
    max_retries: column(Upstream, "max_retries") | None = None
    retry_base_seconds: column(Upstream, "retry_base_seconds") | None = None
    retry_max_wait_seconds: column(Upstream, "retry_max_wait_seconds") | None = None
    retry_deadline_seconds: column(Upstream, "retry_deadline_seconds") | None = None
    circuit_threshold: column(Upstream, "circuit_threshold") | None = None
    circuit_cooldown_seconds: column(Upstream, "circuit_cooldown_seconds") | None = None

    def problems(self, config: ConfigFile) -> list[str]:
        if self.kind == Upstream.Kind.DEMO:
            return []
        # A local OpenAI-compatible server (vLLM, Ollama) may take no key.
        required = (
            ("base_url",) if self.kind == Upstream.Kind.OPENAI_COMPATIBLE else ("base_url", "api_key_env")
        )
        return [f"{key} is required for kind {self.kind!r}" for key in required if not getattr(self, key)]


def upstreams_apply(entries: list[UpstreamEntry], path: Path) -> Iterator[str]:
    for e in entries:
        _, outcome = upstream_upsert(
            name=e.name,
            kind=e.kind,
            base_url=e.base_url,
            api_key_env=e.api_key_env,
            timeout_seconds=e.timeout_seconds,
            priority=e.priority,
            weight=e.weight,
            enabled=e.enabled,
            retry={name: getattr(e, name) for name in UPSTREAM_RETRY_FIELDS},
        )
        yield outcome


# --- [[groups]] -------------------------------------------------------------------------------------


class GroupEntry(Entry):
    label_key = "name"
    unique = ("id", "name")

    id: column(Group, "id", ge=1)
    name: column(Group, "name")
    status: column(Group, "status") = "active"
    image_enabled: column(Group, "image_enabled") = False
    billing: column(Group, "billing") = "balance"
    allow_group_override: column(Group, "allow_group_override") = False
    rpm: column(Group, "rpm") = 0
    tpm: column(Group, "tpm") = 0
    concurrency: column(Group, "concurrency") = 0

    def problems(self, config: ConfigFile) -> list[str]:
        existing = Group.objects.filter(name=self.name).values_list("id", flat=True).first()
        if existing is not None and existing != self.id:
            return [
                f"name already belongs to group id {existing}; "
                "group ids are stable and cannot be changed by renaming"
            ]
        return []


def groups_apply(entries: list[GroupEntry], path: Path) -> Iterator[str]:
    for e in entries:
        _, outcome = group_upsert(
            group_id=e.id,
            name=e.name,
            status=e.status,
            image_enabled=e.image_enabled,
            billing=e.billing,
            allow_group_override=e.allow_group_override,
            rpm=e.rpm,
            tpm=e.tpm,
            concurrency=e.concurrency,
        )
        yield outcome


# --- a model of a group: [[models]] and [[text_models]] --------------------------------------------


class GroupModelEntry(Entry):
    """What image and text models share: a model id unique within its group, upstreams to serve it."""

    label_key = "id"
    unique = (("group", "id"),)

    group: column(Group, "name")
    upstreams: list[column(Upstream, "name")] = Field(min_length=1)

    def problems(self, config: ConfigFile) -> list[str]:
        found = []
        if self.group not in config.group_billing:
            found.append(_undefined("group", self.group))
        found += [
            _undefined("upstream", name) for name in self.upstreams if name not in config.upstream_names
        ]
        return found


def _family_clash(model_id: str, group: str, other: str) -> str:
    return (
        f"id {model_id!r} is also {other} of group {group!r} (in the file or the database); "
        "a model id is unique within its group across image and text models"
    )


# --- [[models]] -------------------------------------------------------------------------------------


class ModelEntry(GroupModelEntry):
    id: column(ImageModel, "model_id")
    price: column(ImageModel, "price")
    upstream_model: column(ImageModel, "upstream_model") | None = None
    sizes: NonEmptyStrings = []
    qualities: NonEmptyStrings = []
    styles: NonEmptyStrings = []
    backgrounds: NonEmptyStrings = []
    output_formats: NonEmptyStrings = []
    output_compression: list[column(ImageModel, "output_compression_min")] | None = Field(
        None, min_length=2, max_length=2
    )
    max_n: column(ImageModel, "max_n") = 1
    edits: column(ImageModel, "edits_supported") = False
    stream: column(ImageModel, "stream_supported") = False
    default_response_format: column(ImageModel, "default_response_format") = "b64_json"
    enabled: column(ImageModel, "enabled") = True

    def problems(self, config: ConfigFile) -> list[str]:
        found = super().problems(config)
        # A clash with a text model the file names is reported on that text model's entry.
        if self.id in config.group_text_models(self.group, in_file=False):
            found.append(_family_clash(self.id, self.group, "a text model"))
        reasons = validate_capabilities(
            sizes=self.sizes,
            qualities=self.qualities,
            styles=self.styles,
            backgrounds=self.backgrounds,
            output_formats=self.output_formats,
            output_compression=tuple(self.output_compression) if self.output_compression else None,
        )
        return found + [f"{key} {reason}" for key, reason in reasons.items()]


def models_apply(entries: list[ModelEntry], path: Path) -> Iterator[str]:
    groups = {g.name: g for g in Group.objects.all()}
    upstreams = {u.name: u for u in Upstream.objects.all()}
    for e in entries:
        _, outcome = image_model_upsert(
            model_id=e.id,
            group=groups[e.group],
            price=e.price,
            upstreams=[upstreams[name] for name in e.upstreams],
            upstream_model=e.upstream_model or "",
            sizes=e.sizes,
            qualities=e.qualities,
            styles=e.styles,
            backgrounds=e.backgrounds,
            output_formats=e.output_formats,
            output_compression=tuple(e.output_compression) if e.output_compression else None,
            max_n=e.max_n,
            edits_supported=e.edits,
            stream_supported=e.stream,
            default_response_format=e.default_response_format,
            enabled=e.enabled,
        )
        yield outcome


# --- [[text_models]] --------------------------------------------------------------------------------


class TextModelEntry(GroupModelEntry):
    id: column(TextModel, "model_id")
    upstream_model: column(TextModel, "upstream_model") | None = None
    input_price: column(TextModel, "input_price")
    output_price: column(TextModel, "output_price")
    cached_input_price: column(TextModel, "cached_input_price") | None = None
    cache_write_price: column(TextModel, "cache_write_price") | None = None
    cache_write_1h_price: column(TextModel, "cache_write_1h_price") | None = None
    max_output_tokens: column(TextModel, "max_output_tokens")
    sticky_seconds: column(TextModel, "sticky_seconds") = 3600
    enabled: column(TextModel, "enabled") = True

    def problems(self, config: ConfigFile) -> list[str]:
        found = super().problems(config)
        if self.id in config.group_image_models(self.group):
            found.append(_family_clash(self.id, self.group, "an image model"))
        return found


def text_models_apply(entries: list[TextModelEntry], path: Path) -> Iterator[str]:
    groups = {g.name: g for g in Group.objects.all()}
    upstreams = {u.name: u for u in Upstream.objects.all()}
    for e in entries:
        _, outcome = text_model_upsert(
            group=groups[e.group],
            model_id=e.id,
            upstream_model=e.upstream_model or "",
            input_price=e.input_price,
            output_price=e.output_price,
            # Absent: the input price (stored as none, so it follows the input price).
            cached_input_price=e.cached_input_price,
            cache_write_price=e.cache_write_price,
            cache_write_1h_price=e.cache_write_1h_price,
            max_output_tokens=e.max_output_tokens,
            sticky_seconds=e.sticky_seconds,
            enabled=e.enabled,
            upstreams=[upstreams[name] for name in e.upstreams],
        )
        yield outcome


# --- [[accounts]] -----------------------------------------------------------------------------------


class AccountEntry(Entry):
    label_key = "username"
    unique = ("username",)

    username: column(User, "username", pattern=USERNAME, hint="letters, digits and @.+-_ only")
    email: column(User, "email") = ""
    balance: column(Wallet, "balance") = Decimal("0")
    allowed_groups: list[column(Group, "name")] = []
    current_group: column(Group, "name") | None = None

    def problems(self, config: ConfigFile) -> list[str]:
        found = [
            f"allowed {_undefined('group', name)}"
            for name in self.allowed_groups
            if name not in config.group_billing
        ]
        if self.current_group is not None and self.current_group not in self.allowed_groups:
            found.append(f"current_group {self.current_group!r} must be one of allowed_groups")
        return found


def accounts_apply(entries: list[AccountEntry], path: Path) -> Iterator[str]:
    accounts = {a.user.username: a for a in Account.objects.select_related("user")}
    groups = {g.name: g for g in Group.objects.all()}
    for e in entries:
        account = accounts.get(e.username)
        outcome = "unchanged"
        if account is None:
            account = account_create(username=e.username, email=e.email)
            if e.balance > 0:
                # The opening balance is credited once, at creation; later runs never add it again.
                wallet_top_up(
                    account=account,
                    amount=e.balance,
                    reference="config:opening-balance",
                    note=f"opening balance from {path.name}",
                )
            outcome = "created"
        elif e.email and account.user.email != e.email:
            account.user.email = e.email
            account.user.save(update_fields=["email"])
            outcome = "updated"
        changed = account_set_groups(
            account=account,
            allowed_groups=[groups[name] for name in e.allowed_groups],
            current_group=groups[e.current_group] if e.current_group else None,
        )
        yield "updated" if changed and outcome == "unchanged" else outcome


# --- [[subscriptions]] ------------------------------------------------------------------------------


class SubscriptionEntry(Entry):
    unique = (("account", "group"),)

    account: column(User, "username")
    group: column(Group, "name")
    daily_limit: column(Subscription, "daily_limit") | None = None
    weekly_limit: column(Subscription, "weekly_limit") | None = None
    monthly_limit: column(Subscription, "monthly_limit") | None = None
    total_limit: column(Subscription, "total_limit") | None = None
    models: list[column(ImageModel, "model_id")] = []
    starts_at: column(Subscription, "starts_at") | None = None
    expires_at: column(Subscription, "expires_at") | None = None

    @classmethod
    def label(cls, raw: dict[str, Any]) -> str | None:
        return f"{raw.get('account')}@{raw.get('group')}"

    def problems(self, config: ConfigFile) -> list[str]:
        found = []
        if self.account not in config.usernames:
            found.append(_undefined("account", self.account))
        billing = config.group_billing.get(self.group)
        if billing is None:
            found.append(_undefined("group", self.group))
        elif billing != Group.Billing.SUBSCRIPTION:
            found.append(f"group {self.group!r} is billed by balance, not by subscription")
        if self.starts_at is not None and self.expires_at is not None and self.expires_at <= self.starts_at:
            found.append("expires_at must be after starts_at")
        if self.models:
            offered = config.group_models(self.group)
            found += [
                f"model {model_id!r} is not a model of group {self.group!r}"
                for model_id in self.models
                if model_id not in offered
            ]
        return found


def subscriptions_apply(entries: list[SubscriptionEntry], path: Path) -> Iterator[str]:
    accounts = {a.user.username: a for a in Account.objects.select_related("user")}
    groups = {g.name: g for g in Group.objects.all()}
    for e in entries:
        account, group = accounts[e.account], groups[e.group]
        existing_start: datetime | None = (
            account.subscriptions.filter(group=group).values_list("starts_at", flat=True).first()
        )
        _, changed = subscription_upsert(
            account=account,
            group=group,
            daily_limit=e.daily_limit,
            weekly_limit=e.weekly_limit,
            monthly_limit=e.monthly_limit,
            total_limit=e.total_limit,
            model_ids=e.models,
            # Without starts_at a new subscription starts now and an existing one keeps its start.
            starts_at=e.starts_at or existing_start or timezone.now(),
            expires_at=e.expires_at,
        )
        yield "created" if existing_start is None else ("updated" if changed else "unchanged")


# --- the file ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    name: str
    entry: type[Entry]
    # Writes the section's entries (the whole file is valid by then); yields one outcome per entry:
    # "created", "updated" or "unchanged".
    apply: Callable[[list[Any], Path], Iterator[str]]


# In the order they are applied: an entry may refer to the sections above it.
SECTIONS = (
    Section("upstreams", UpstreamEntry, upstreams_apply),
    Section("groups", GroupEntry, groups_apply),
    Section("models", ModelEntry, models_apply),
    Section("text_models", TextModelEntry, text_models_apply),
    Section("accounts", AccountEntry, accounts_apply),
    Section("subscriptions", SubscriptionEntry, subscriptions_apply),
)
