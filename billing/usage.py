"""The usage log's rows: one UsageRecord per call of a billed endpoint (api/usage.py decides when)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.utils import timezone

from billing.models import UsageRecord
from core.modelutils import POSITIVE_INTEGER_MAX, queryset_delete_in_batches

# What a PostgreSQL text column cannot hold: NUL, and a surrogate code point (in a Python string
# always a lone one, which UTF-8 cannot encode).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def text_storable(text: str) -> str:
    """`text` with every character a text column cannot store replaced by U+FFFD, one for one."""
    return _UNSTORABLE.sub("\ufffd", text)


# The most tokens of one kind a call is counted: what a usage record's token columns hold (they are
# PositiveIntegerFields). No call has so many; an upstream may say any number, and beyond this a
# charge (capped at its hold anyway) could exceed Decimal's precision.
TOKEN_COUNT_MAX = POSITIVE_INTEGER_MAX


@dataclass(frozen=True)
class TokenCounts:
    """A text call's tokens as the upstream reported them, split by price: `input` excludes the
    cached and cache-write tokens; `cache_write_1h` is the part of `cache_write` written to a one-hour
    cache (Anthropic prices it apart); `output` includes reasoning tokens. Each is taken as at most
    TOKEN_COUNT_MAX."""

    input: int = 0
    cached: int = 0
    cache_write: int = 0
    output: int = 0
    cache_write_1h: int = 0

    def __post_init__(self) -> None:
        for count in fields(self):
            if getattr(self, count.name) > TOKEN_COUNT_MAX:
                object.__setattr__(self, count.name, TOKEN_COUNT_MAX)


def usage_record_build(
    *,
    request_id: str,
    account_id: int,
    credential: str,
    group_id: int | None,
    model_id: str,
    endpoint: str,
    billing: str,
    status: int,
    error_code: str,
    amount: Decimal,
    upstream: str,
    latency_ms: int,
    tokens: TokenCounts | None = None,
    created_at: datetime | None = None,
) -> UsageRecord:
    """An unsaved usage record, its values made storable and cut to their columns (the token counts
    are within them: TokenCounts): `usage_record_insert` saves it, or
    `hold_capture(usage_record=...)` writes it together with the charge. A caller's text (a model
    name) may hold what PostgreSQL refuses: a record is never lost to its content."""
    return UsageRecord(
        request_id=text_storable(request_id)[:200],
        account_id=account_id,
        credential=text_storable(credential)[:64],
        group_id=group_id,
        model_id=text_storable(model_id)[:200],
        endpoint=text_storable(endpoint)[:100],
        billing=billing,
        status=status,
        error_code=text_storable(error_code)[:100],
        amount=amount,
        upstream=text_storable(upstream)[:100],
        latency_ms=max(0, latency_ms),
        input_tokens=tokens.input if tokens is not None else None,
        cached_tokens=tokens.cached if tokens is not None else None,
        cache_write_tokens=tokens.cache_write if tokens is not None else None,
        cache_write_1h_tokens=tokens.cache_write_1h if tokens is not None else None,
        output_tokens=tokens.output if tokens is not None else None,
        created_at=created_at or timezone.now(),
    )


def usage_record_insert(*, record: UsageRecord) -> UsageRecord:
    """Write a record built by `usage_record_build`."""
    record.save(force_insert=True)
    return record


def usage_record_outcome_set(*, record: UsageRecord, status: int, error_code: str, latency_ms: int) -> None:
    """A call whose usage record was written with its capture, and which failed after that (e.g. the
    response could not be stored or sent): the record now says how the call ended. Its amount stays
    what the capture charged, as the ledger has it."""
    record.status = status
    record.error_code = error_code[:100]
    record.latency_ms = max(0, latency_ms)
    UsageRecord.objects.filter(pk=record.pk).update(
        status=record.status, error_code=record.error_code, latency_ms=record.latency_ms
    )


def usage_record_exists(*, request_id: str, endpoint: str) -> bool:
    return UsageRecord.objects.filter(request_id=request_id, endpoint=endpoint).exists()


LOST_PREFIX = "usage_record_lost "
# The key of the lost records' signatures: an HMAC under a key derived from SECRET_KEY and this salt
# (Django's signing), so that only the gateway can write a line that `usage_records_restore` trusts.
_LOST_SIGNER_SALT = "billing.usage.usage_record_lost"


def _lost_signer() -> signing.Signer:
    return signing.Signer(salt=_LOST_SIGNER_SALT, algorithm="sha256")


def usage_record_fields_dump(*, record: UsageRecord) -> dict[str, Any]:
    """Every column of a record (by attribute name; `id` when it was written)."""
    return {column.attname: getattr(record, column.attname) for column in record._meta.concrete_fields}


def usage_record_lost_line(*, record: UsageRecord) -> str:
    """The `usage_record_lost {json}:{signature}` message of a record that could not be written, for
    `usage_records_restore` to read back: every column as one line of JSON (control characters
    escaped by the JSON itself), signed."""
    payload = json.dumps(usage_record_fields_dump(record=record), default=str)
    return LOST_PREFIX + _lost_signer().sign(payload)


@dataclass
class RestoreReport:
    """What `usage_records_restore` did: records written, records already there, and the lines it
    refused (line number, why): unsigned, altered, or not a record."""

    written: int = 0
    skipped: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)


def _lost_message(line: str) -> str | None:
    """The `usage_record_lost ...` message of a log line, text or JSON (LOG_FORMAT=json); None for
    any other line."""
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            message = json.loads(stripped).get("message")
        except (ValueError, AttributeError):
            message = None
        if isinstance(message, str) and message.startswith(LOST_PREFIX):
            return message
    at = stripped.find(LOST_PREFIX)
    return stripped[at:] if at >= 0 else None


def usage_records_restore(*, lines: Iterable[str]) -> RestoreReport:
    """Write the records of signed `usage_record_lost` log lines that are not in the table yet (a
    record with an id is updated to the logged outcome instead). A line whose signature does not
    verify (written by anyone but the gateway, or altered) or that holds no record is refused and
    reported, and the lines after it are still restored. Running it twice over the same log writes
    nothing the second time."""
    report = RestoreReport()
    signer = _lost_signer()
    for number, line in enumerate(lines, start=1):
        message = _lost_message(line)
        if message is None:
            continue
        try:
            payload = signer.unsign(message[len(LOST_PREFIX) :])
        except signing.BadSignature:
            report.refused.append((number, "unsigned or altered"))
            continue
        try:
            with transaction.atomic():
                written = _usage_record_restore(fields=json.loads(payload))
        except Exception as exc:  # a signed line that still cannot be written: reported, not fatal
            report.refused.append((number, f"not restorable: {type(exc).__name__}: {exc}"))
            continue
        if written:
            report.written += 1
        else:
            report.skipped += 1
    return report


def _usage_record_restore(*, fields: dict[str, Any]) -> bool:
    """Write one logged record; False when it is already there."""
    pk = fields.pop("id", None)
    if pk is not None:
        return bool(
            UsageRecord.objects.filter(pk=pk).update(
                status=fields["status"], error_code=fields["error_code"], latency_ms=fields["latency_ms"]
            )
        )
    if usage_record_exists(request_id=fields["request_id"], endpoint=fields["endpoint"]):
        return False
    UsageRecord(**fields).save(force_insert=True)
    return True


def usage_records_purge(
    *, older_than_days: int | None = None, now: datetime | None = None, batch_size: int = 5000
) -> int:
    """Delete usage records older than the retention (GATEWAY_USAGE_RETENTION_DAYS), in batches so
    no statement locks the table for long. Returns how many were deleted."""
    days = older_than_days if older_than_days is not None else settings.GATEWAY_USAGE_RETENTION_DAYS
    cutoff = (now or timezone.now()) - timedelta(days=days)
    return queryset_delete_in_batches(
        UsageRecord.objects.filter(created_at__lt=cutoff), batch_size=batch_size
    )
