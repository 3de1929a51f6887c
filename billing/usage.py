"""The usage log's rows: one UsageRecord per call of a billed endpoint (api/usage.py decides when)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from billing.models import UsageRecord
from core.modelutils import queryset_delete_in_batches


@dataclass(frozen=True)
class TokenCounts:
    """A text call's tokens as the upstream reported them, split by price: `input` excludes the
    cached and cache-write tokens; `output` includes reasoning tokens."""

    input: int = 0
    cached: int = 0
    cache_write: int = 0
    output: int = 0


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
    """An unsaved usage record, its values cut to their columns: `usage_record_insert` saves it, or
    `hold_capture(usage_record=...)` writes it together with the charge."""
    return UsageRecord(
        request_id=request_id[:200],
        account_id=account_id,
        credential=credential[:64],
        group_id=group_id,
        model_id=model_id[:200],
        endpoint=endpoint[:100],
        billing=billing,
        status=status,
        error_code=error_code[:100],
        amount=amount,
        upstream=upstream[:100],
        latency_ms=max(0, latency_ms),
        input_tokens=tokens.input if tokens is not None else None,
        cached_tokens=tokens.cached if tokens is not None else None,
        cache_write_tokens=tokens.cache_write if tokens is not None else None,
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


def usage_record_fields_dump(*, record: UsageRecord) -> dict[str, Any]:
    """Every column of a record (by attribute name; `id` when it was written), for the
    `usage_record_lost {json}` log line that `usage_records_restore` reads back."""
    return {field.attname: getattr(record, field.attname) for field in record._meta.concrete_fields}


def usage_records_restore(*, lines: Iterable[str]) -> tuple[int, int]:
    """Write the records of `usage_record_lost {json}` log lines that are not in the table yet (a
    record with an id is updated to the logged outcome instead). Returns (written, skipped); running it
    twice over the same log writes nothing the second time."""
    written = skipped = 0
    for line in lines:
        at = line.find(LOST_PREFIX)
        if at < 0:
            continue
        fields = json.loads(line[at + len(LOST_PREFIX) :])
        pk = fields.pop("id", None)
        if pk is not None:
            updated = UsageRecord.objects.filter(pk=pk).update(
                status=fields["status"], error_code=fields["error_code"], latency_ms=fields["latency_ms"]
            )
            written += updated
            skipped += 1 - updated
        elif usage_record_exists(request_id=fields["request_id"], endpoint=fields["endpoint"]):
            skipped += 1
        else:
            UsageRecord(**fields).save(force_insert=True)
            written += 1
    return written, skipped


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
