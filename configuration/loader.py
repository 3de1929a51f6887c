"""Declarative configuration: upstreams, groups, models, accounts and subscriptions from a TOML file.

`config_load(path=...)` validates the whole file first (unknown keys, types, values, references)
and collects every problem; only a file with none is applied, inside one transaction, through each
app's services. Applying a file twice changes nothing: rows are matched by their natural keys and
only differing fields are written; an account's opening balance is credited once, when the account
is created. The schema is documented in docs/configuration.md.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import Account
from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.money import MoneyError, money_parse
from billing.subscriptions import subscription_upsert
from groups.models import Group
from groups.services import group_upsert
from images.capabilities import validate_capabilities
from images.models import RESPONSE_FORMATS, ImageModel
from images.services import image_model_upsert
from upstreams.models import Upstream
from upstreams.services import UPSTREAM_RETRY_FIELDS, upstream_upsert

SECTIONS = ("upstreams", "groups", "models", "accounts", "subscriptions")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
USERNAME = re.compile(r"[\w.@+-]{1,150}")


class ConfigError(Exception):
    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: rejected, nothing applied:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass
class Summary:
    counts: dict[str, Counter] = field(default_factory=lambda: {s: Counter() for s in SECTIONS})

    def add(self, section: str, outcome: str) -> None:
        self.counts[section][outcome] += 1

    @property
    def changed(self) -> bool:
        return any(c["created"] or c["updated"] for c in self.counts.values())

    def lines(self) -> list[str]:
        return [
            f"{section}: {c['created']} created, {c['updated']} updated, {c['unchanged']} unchanged"
            for section, c in self.counts.items()
            if sum(c.values())
        ]


# --- field readers: each returns the parsed value or raises _Bad with the reason -------------------


class _Bad(Exception):
    pass


_MISSING = object()


def _str(value: Any, *, pattern: re.Pattern | None = None, max_len: int = 200, hint: str = "") -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad("must be a non-empty string")
    if len(value) > max_len:
        raise _Bad(f"must be at most {max_len} characters")
    if pattern is not None and not pattern.fullmatch(value):
        raise _Bad(f"{value!r} is not valid{hint}")
    return value


def _int(value: Any, *, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Bad(f"must be a whole number, got {value!r}")
    if minimum is not None and value < minimum:
        raise _Bad(f"must be at least {minimum}, got {value}")
    return value


def _seconds(value: Any, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"must be a number of seconds, got {value!r}")
    if not minimum <= value < float("inf"):
        raise _Bad(f"must be at least {minimum}, got {value}")
    return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false, got {value!r}")
    return value


def _choice(*choices: str) -> Callable[[Any], str]:
    def read(value: Any) -> str:
        if value not in choices:
            raise _Bad(f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    return read


def _money(value: Any) -> Decimal:
    if isinstance(value, float):
        raise _Bad(f'write amounts as strings ("{value}"): a TOML float cannot hold ¥ amounts exactly')
    try:
        return money_parse(value)
    except MoneyError as exc:
        raise _Bad(str(exc)) from None


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _Bad("must be a list of non-empty strings")
    return value


def _datetime(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise _Bad(f"{value!r} is not an RFC 3339 date-time such as 2027-12-31T00:00:00Z") from None
    if not isinstance(value, datetime):
        raise _Bad(f"must be a date-time such as 2027-12-31T00:00:00Z, got {value!r}")
    if value.tzinfo is None:
        raise _Bad("must carry a time zone offset, e.g. 2027-12-31T00:00:00Z")
    return value


def _compression(value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise _Bad("must be [min, max]")
    low, high = (_int(v, minimum=0) for v in value)
    return (low, high)


# (key, reader, default); a default of _MISSING means the key is required.
SCHEMA: dict[str, list[tuple[str, Callable[[Any], Any], Any]]] = {
    "upstreams": [
        ("name", _str, _MISSING),
        ("kind", _choice(*Upstream.Kind.values), _MISSING),
        (
            "base_url",
            lambda v: _str(v, pattern=re.compile(r"https?://\S+"), max_len=500, hint=" (http(s) URL)"),
            "",
        ),
        ("api_key_env", lambda v: _str(v, pattern=ENV_NAME, hint=" (an environment variable name)"), ""),
        ("timeout_seconds", lambda v: _int(v, minimum=1), 120),
        ("priority", _int, 0),
        ("weight", lambda v: _int(v, minimum=1), 1),
        ("enabled", _bool, True),
        ("max_retries", lambda v: _int(v, minimum=0), None),
        ("retry_base_seconds", lambda v: _seconds(v, minimum=0), None),
        ("retry_max_wait_seconds", lambda v: _seconds(v, minimum=0), None),
        ("retry_deadline_seconds", lambda v: _seconds(v, minimum=0), None),
        ("circuit_threshold", lambda v: _int(v, minimum=1), None),
        ("circuit_cooldown_seconds", lambda v: _seconds(v, minimum=1), None),
    ],
    "groups": [
        ("id", lambda v: _int(v, minimum=1), _MISSING),
        ("name", lambda v: _str(v, max_len=100), _MISSING),
        ("status", _choice(*Group.Status.values), "active"),
        ("image_enabled", _bool, False),
        ("billing", _choice(*Group.Billing.values), "balance"),
        ("allow_group_override", _bool, False),
        ("rpm", lambda v: _int(v, minimum=0), 0),
        ("concurrency", lambda v: _int(v, minimum=0), 0),
    ],
    "models": [
        ("id", _str, _MISSING),
        ("group", _str, _MISSING),
        ("price", _money, _MISSING),
        ("upstreams", _str_list, _MISSING),
        ("upstream_model", _str, None),
        ("sizes", _str_list, []),
        ("qualities", _str_list, []),
        ("styles", _str_list, []),
        ("backgrounds", _str_list, []),
        ("output_formats", _str_list, []),
        ("output_compression", _compression, None),
        ("max_n", lambda v: _int(v, minimum=1), 1),
        ("edits", _bool, False),
        ("stream", _bool, False),
        ("default_response_format", _choice(*RESPONSE_FORMATS), "b64_json"),
        ("enabled", _bool, True),
    ],
    "accounts": [
        ("username", lambda v: _str(v, pattern=USERNAME, max_len=150), _MISSING),
        ("email", lambda v: _str(v, max_len=254), ""),
        ("balance", _money, Decimal("0")),
        ("allowed_groups", _str_list, []),
        ("current_group", _str, None),
    ],
    "subscriptions": [
        ("account", _str, _MISSING),
        ("group", _str, _MISSING),
        ("daily_limit", _money, None),
        ("weekly_limit", _money, None),
        ("monthly_limit", _money, None),
        ("total_limit", _money, None),
        ("models", _str_list, []),
        ("starts_at", _datetime, None),
        ("expires_at", _datetime, None),
    ],
}
IDENTITY = {
    "upstreams": "name",
    "groups": "name",
    "models": "id",
    "accounts": "username",
    "subscriptions": None,
}


def _read_entries(data: dict[str, Any], problems: list[str]) -> dict[str, list[dict[str, Any]]]:
    parsed: dict[str, list[dict[str, Any]]] = {section: [] for section in SECTIONS}
    for section in data:
        if section not in SECTIONS:
            problems.append(f"unknown section [{section}]; known: {', '.join(SECTIONS)}")
    for section in SECTIONS:
        raw_entries = data.get(section, [])
        if not isinstance(raw_entries, list) or not all(isinstance(e, dict) for e in raw_entries):
            problems.append(f"{section}: must be written as [[{section}]] tables")
            continue
        schema = SCHEMA[section]
        known = {key for key, _, _ in schema}
        for index, raw in enumerate(raw_entries):
            label = _label(section, index, raw)
            entry: dict[str, Any] = {}
            for key in raw:
                if key not in known:
                    problems.append(f"{label}: unknown key {key!r}; known: {', '.join(sorted(known))}")
            for key, reader, default in schema:
                if key not in raw:
                    if default is _MISSING:
                        problems.append(f"{label}: missing required key {key!r}")
                    else:
                        entry[key] = default
                    continue
                try:
                    entry[key] = reader(raw[key])
                except _Bad as exc:
                    problems.append(f"{label}: {key} {exc}")
            parsed[section].append(entry)
    return parsed


def _label(section: str, index: int, raw: dict[str, Any]) -> str:
    identity = IDENTITY[section]
    if identity and isinstance(raw.get(identity), str | int):
        return f"{section}[{index}] ({raw[identity]})"
    if section == "subscriptions":
        return f"{section}[{index}] ({raw.get('account')}@{raw.get('group')})"
    return f"{section}[{index}]"


def _check(parsed: dict[str, list[dict[str, Any]]], problems: list[str]) -> None:
    """Cross-entry rules: uniqueness within the file and references to the file or the database."""

    def duplicates(section: str, key: Callable[[dict], Any], what: str) -> None:
        seen = Counter(key(e) for e in parsed[section])
        for value, count in seen.items():
            if count > 1 and value is not None:
                problems.append(f"{section}: {what} {value!r} appears {count} times")

    duplicates("upstreams", lambda e: e.get("name"), "name")
    duplicates("groups", lambda e: e.get("id"), "id")
    duplicates("groups", lambda e: e.get("name"), "name")
    duplicates("models", lambda e: (e.get("group"), e.get("id")), "(group, id)")
    duplicates("accounts", lambda e: e.get("username"), "username")
    duplicates("subscriptions", lambda e: (e.get("account"), e.get("group")), "(account, group)")

    upstream_names = {e.get("name") for e in parsed["upstreams"]} | set(
        Upstream.objects.values_list("name", flat=True)
    )
    file_groups = {e.get("name"): e for e in parsed["groups"]}
    db_groups = {g.name: g for g in Group.objects.all()}
    group_billing = {name: g.billing for name, g in db_groups.items()} | {
        name: e.get("billing") for name, e in file_groups.items()
    }
    usernames = {e.get("username") for e in parsed["accounts"]} | set(
        Account.objects.values_list("user__username", flat=True)
    )

    for index, entry in enumerate(parsed["groups"]):
        existing = db_groups.get(entry.get("name"))
        if existing is not None and entry.get("id") is not None and existing.id != entry["id"]:
            problems.append(
                f"groups[{index}] ({entry['name']}): name already belongs to group id {existing.id}; "
                "group ids are stable and cannot be changed by renaming"
            )
    for index, entry in enumerate(parsed["upstreams"]):
        label = f"upstreams[{index}] ({entry.get('name')})"
        if entry.get("kind") in ("openai", "gemini"):
            if not entry.get("base_url"):
                problems.append(f"{label}: base_url is required for kind {entry['kind']!r}")
            if not entry.get("api_key_env"):
                problems.append(f"{label}: api_key_env is required for kind {entry['kind']!r}")
    for index, entry in enumerate(parsed["models"]):
        label = f"models[{index}] ({entry.get('id')})"
        if entry.get("group") is not None and entry["group"] not in group_billing:
            problems.append(f"{label}: group {entry['group']!r} is not defined in the file or the database")
        for name in entry.get("upstreams") or []:
            if name not in upstream_names:
                problems.append(f"{label}: upstream {name!r} is not defined in the file or the database")
        if entry.get("upstreams") == []:
            problems.append(f"{label}: upstreams must name at least one upstream")
        reasons = validate_capabilities(
            sizes=entry.get("sizes", []),
            qualities=entry.get("qualities", []),
            styles=entry.get("styles", []),
            backgrounds=entry.get("backgrounds", []),
            output_formats=entry.get("output_formats", []),
            output_compression=entry.get("output_compression"),
        )
        problems.extend(f"{label}: {key} {reason}" for key, reason in reasons.items())
    for index, entry in enumerate(parsed["accounts"]):
        label = f"accounts[{index}] ({entry.get('username')})"
        for name in entry.get("allowed_groups") or []:
            if name not in group_billing:
                problems.append(f"{label}: allowed group {name!r} is not defined in the file or the database")
        current = entry.get("current_group")
        if current is not None and current not in (entry.get("allowed_groups") or []):
            problems.append(f"{label}: current_group {current!r} must be one of allowed_groups")
    for index, entry in enumerate(parsed["subscriptions"]):
        label = f"subscriptions[{index}] ({entry.get('account')}@{entry.get('group')})"
        if entry.get("account") is not None and entry["account"] not in usernames:
            problems.append(
                f"{label}: account {entry['account']!r} is not defined in the file or the database"
            )
        group_name = entry.get("group")
        if group_name is not None:
            if group_name not in group_billing:
                problems.append(f"{label}: group {group_name!r} is not defined in the file or the database")
            elif group_billing[group_name] != "subscription":
                problems.append(f"{label}: group {group_name!r} is billed by balance, not by subscription")
        starts, expires = entry.get("starts_at"), entry.get("expires_at")
        if starts is not None and expires is not None and expires <= starts:
            problems.append(f"{label}: expires_at must be after starts_at")
        if entry.get("models") and group_name is not None:
            offered = {e.get("id") for e in parsed["models"] if e.get("group") == group_name} | set(
                ImageModel.objects.filter(group__name=group_name).values_list("model_id", flat=True)
            )
            for model_id in entry["models"]:
                if model_id not in offered:
                    problems.append(f"{label}: model {model_id!r} is not a model of group {group_name!r}")


def config_parse(*, path: Path) -> dict[str, list[dict[str, Any]]]:
    """Read and validate a config file; raises ConfigError listing every problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(path), ["file not found"]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    problems: list[str] = []
    parsed = _read_entries(data, problems)
    if not problems:
        _check(parsed, problems)
    if problems:
        raise ConfigError(str(path), problems)
    return parsed


def config_load(*, path: Path) -> Summary:
    """Validate, then apply the whole file in one transaction; nothing is half-applied."""
    parsed = config_parse(path=path)
    summary = Summary()
    with transaction.atomic():
        upstreams: dict[str, Upstream] = {u.name: u for u in Upstream.objects.all()}
        for e in parsed["upstreams"]:
            upstream, outcome = upstream_upsert(
                name=e["name"],
                kind=e["kind"],
                base_url=e["base_url"],
                api_key_env=e["api_key_env"],
                timeout_seconds=e["timeout_seconds"],
                priority=e["priority"],
                weight=e["weight"],
                enabled=e["enabled"],
                retry={name: e[name] for name in UPSTREAM_RETRY_FIELDS},
            )
            upstreams[upstream.name] = upstream
            summary.add("upstreams", outcome)
        for e in parsed["groups"]:
            _, outcome = group_upsert(
                group_id=e["id"],
                name=e["name"],
                status=e["status"],
                image_enabled=e["image_enabled"],
                billing=e["billing"],
                allow_group_override=e["allow_group_override"],
                rpm=e["rpm"],
                concurrency=e["concurrency"],
            )
            summary.add("groups", outcome)
        groups = {g.name: g for g in Group.objects.all()}
        for e in parsed["models"]:
            _, outcome = image_model_upsert(
                model_id=e["id"],
                group=groups[e["group"]],
                price=e["price"],
                upstreams=[upstreams[name] for name in e["upstreams"]],
                upstream_model=e["upstream_model"] or "",
                sizes=e["sizes"],
                qualities=e["qualities"],
                styles=e["styles"],
                backgrounds=e["backgrounds"],
                output_formats=e["output_formats"],
                output_compression=e["output_compression"],
                max_n=e["max_n"],
                edits_supported=e["edits"],
                stream_supported=e["stream"],
                default_response_format=e["default_response_format"],
                enabled=e["enabled"],
            )
            summary.add("models", outcome)
        accounts = {a.user.username: a for a in Account.objects.select_related("user")}
        for e in parsed["accounts"]:
            account = accounts.get(e["username"])
            outcome = "unchanged"
            if account is None:
                account = account_create(username=e["username"], email=e["email"])
                if e["balance"] > 0:
                    # The opening balance is credited once, at creation; later runs never add it again.
                    wallet_top_up(
                        account=account,
                        amount=e["balance"],
                        reference="config:opening-balance",
                        note=f"opening balance from {path.name}",
                    )
                accounts[account.user.username] = account
                outcome = "created"
            elif e["email"] and account.user.email != e["email"]:
                account.user.email = e["email"]
                account.user.save(update_fields=["email"])
                outcome = "updated"
            current = groups[e["current_group"]] if e["current_group"] else None
            if (
                account_set_groups(
                    account=account,
                    allowed_groups=[groups[name] for name in e["allowed_groups"]],
                    current_group=current,
                )
                and outcome == "unchanged"
            ):
                outcome = "updated"
            summary.add("accounts", outcome)
        for e in parsed["subscriptions"]:
            account = accounts[e["account"]]
            group = groups[e["group"]]
            existing_start = (
                account.subscriptions.filter(group=group).values_list("starts_at", flat=True).first()
            )
            _, changed = subscription_upsert(
                account=account,
                group=group,
                daily_limit=e["daily_limit"],
                weekly_limit=e["weekly_limit"],
                monthly_limit=e["monthly_limit"],
                total_limit=e["total_limit"],
                model_ids=e["models"],
                # Without starts_at a new subscription starts now and an existing one keeps its start.
                starts_at=e["starts_at"] or existing_start or timezone.now(),
                expires_at=e["expires_at"],
            )
            summary.add(
                "subscriptions",
                "created" if existing_start is None else ("updated" if changed else "unchanged"),
            )
    return summary
