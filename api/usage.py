"""The usage log: one UsageRecord per call of a billed endpoint, successful or not."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING

from django.db import InterfaceError, OperationalError

from api.errors import api_error_for
from billing.usage import (
    TokenCounts,
    usage_record_build,
    usage_record_exists,
    usage_record_insert,
    usage_record_lost_line,
    usage_record_outcome_set,
)
from core.db import database_reconnect
from core.errors import ApiError, DomainError
from core.metrics import call_observe
from upstreams.providers.base import UpstreamError

if TYPE_CHECKING:
    from billing.models import UsageRecord
    from groups.snapshots import GroupSnapshot
    from keys.credentials import Credential

logger = logging.getLogger("gateway.usage")
# One line per API call when its scope closes: who, which model, how it ended, where it went, how long
# it took and what it cost. Never a secret (a key by its display prefix) and never the request's
# content. Its fields are the `extra` of the record: JSON fields with LOG_FORMAT=json.
call_logger = logging.getLogger("gateway.call")


class UsageScope:
    """What the pipeline learns about one call as it goes; written as a UsageRecord when it ends."""

    def __init__(self, *, request_id: str, endpoint: str, credential: Credential) -> None:
        self.request_id = request_id
        self.endpoint = endpoint
        self.credential = credential
        self.group: GroupSnapshot | None = None
        self.model_id = ""
        self.upstream = ""
        # Upstream attempts made (each one names its upstream first): retries and failovers included.
        self.attempts = 0
        self.billing = ""
        # What was charged (wallet) or counted (subscription); set by metered_call on capture only.
        self.charged = Decimal("0")
        # The record once written: a capture writes it in the same statement as the charge, and the
        # scope then writes no second one.
        self.record: UsageRecord | None = None
        # A text call's tokens, once the upstream has reported them (None for the image endpoints).
        self.tokens: TokenCounts | None = None
        self.started = time.monotonic()

    def set_requested_model(self, model: object) -> None:
        """The model the caller asked for, recorded before resolution so that a call refused before
        it (unknown model, no access) still says which model it was for; set_target then replaces it
        with the resolved one."""
        if isinstance(model, str):
            self.model_id = model[:200]  # UsageRecord.model_id's max_length

    def set_target(self, *, group: GroupSnapshot, model_id: str) -> None:
        self.group = group
        self.model_id = model_id
        self.billing = group.billing

    def set_upstream(self, name: str) -> None:
        """The upstream of the attempt about to be made (called once per attempt)."""
        self.upstream = name
        self.attempts += 1

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def record_build(self, *, status: int, error_code: str) -> UsageRecord:
        """This call's usage record as it stands now, unsaved."""
        return usage_record_build(
            request_id=self.request_id,
            account_id=self.credential.account.pk,
            credential=self.credential.limit_key,
            group_id=self.group.pk if self.group is not None else None,
            model_id=self.model_id,
            endpoint=self.endpoint,
            billing=self.billing,
            status=status,
            error_code=error_code,
            amount=self.charged,
            upstream=self.upstream,
            latency_ms=self.elapsed_ms(),
            tokens=self.tokens,
        )


def usage_outcome_for(*, error: BaseException | None) -> tuple[int, str]:
    """(HTTP status, error code) to record for a call that ended with `error` (None: success)."""
    if error is None:
        return 200, ""
    if isinstance(error, (ApiError, DomainError)):
        answered = api_error_for(error)
        return answered.status, answered.code or ""
    if isinstance(error, UpstreamError):
        # An upstream failure that escaped unconverted still is an upstream error, not our crash.
        status = error.status if error.status is not None and 400 <= error.status <= 599 else 502
        return status, "upstream_error"
    return 500, "internal_error"


@contextmanager
def usage_scope(*, request_id: str, endpoint: str, credential: Credential) -> Iterator[UsageScope]:
    """Open a usage scope for one call; exactly one UsageRecord is written for it.

    A successful metered call's capture writes the record together with the charge (status 200, the
    amount captured); otherwise the scope writes it on exit. Normal exit: status 200 with the amount
    charged. An escaping exception: the status and code of the ApiError (a domain error: of the
    ApiError api.errors maps it to; an UpstreamError: its status
    or 502, "upstream_error"; anything else: 500, "internal_error"), then the exception is re-raised;
    if the capture had already written the record, the record is updated to that status and keeps
    its charge. The amount is what metered_call captured, which is 0 for every call that failed
    before or during the upstream call. Failing to write the record is logged (after one retry on a
    new connection, as a signed `usage_record_lost {json}` line) and never turns the caller's answer into an
    error.
    """
    scope = UsageScope(request_id=request_id, endpoint=endpoint, credential=credential)
    error: BaseException | None = None
    try:
        yield scope
    except BaseException as exc:
        error = exc
        raise
    finally:
        status, code = usage_outcome_for(error=error)
        _usage_record_write(scope=scope, status=status, code=code)
        _metrics_record(scope=scope, status=status, code=code)
        _call_log(scope=scope, status=status, code=code)


def _call_log(*, scope: UsageScope, status: int, code: str) -> None:
    """The call's `gateway.call` line. Never raises: a log line must not change the answer."""
    if not call_logger.isEnabledFor(logging.INFO):
        return
    try:
        fields = {
            "request_id": scope.request_id,
            "credential": scope.credential.log_name,
            "model": scope.model_id,
            "endpoint": scope.endpoint,
            "status": status,
            "error_code": code,
            "upstream": scope.upstream,
            "attempts": scope.attempts,
            "latency_ms": scope.elapsed_ms(),
            "amount": str(scope.charged),
        }
        call_logger.info(
            "call %s",
            " ".join(f"{name}={value if value != '' else '-'}" for name, value in fields.items()),
            extra=fields,
        )
    except Exception:
        logger.exception("could not log the call of request %s", scope.request_id)


def _usage_record_write(*, scope: UsageScope, status: int, code: str) -> None:
    """Write (or, after a capture wrote it, update) the call's record. Never raises. A connection
    broken meanwhile (PostgreSQL restarted) is replaced and the write tried once more; a record that
    still cannot be written is logged as one signed line `usage_record_lost {json}` with every field, for an
    operator to reconcile (`python manage.py usage_records_restore < log`)."""
    for attempt in (1, 2):
        try:
            if scope.record is None:
                record = scope.record_build(status=status, error_code=code)
                if attempt == 2 and usage_record_exists(request_id=scope.request_id, endpoint=scope.endpoint):
                    return  # the first attempt was committed after all; its answer was lost
                usage_record_insert(record=record)
            elif (status, code) != (scope.record.status, scope.record.error_code):
                # Failed after the capture had written the record (the call is charged): one UPDATE,
                # on this rare path only, so the record says how the call ended.
                usage_record_outcome_set(
                    record=scope.record, status=status, error_code=code, latency_ms=scope.elapsed_ms()
                )
            return
        except (OperationalError, InterfaceError):
            if attempt == 1 and _reconnected():
                continue
            logger.exception("could not write the usage record of request %s", scope.request_id)
        except Exception:
            logger.exception("could not write the usage record of request %s", scope.request_id)
        break
    record = scope.record or scope.record_build(status=status, error_code=code)
    if scope.record is not None:
        record.status, record.error_code, record.latency_ms = status, code, scope.elapsed_ms()
    logger.error("%s", usage_record_lost_line(record=record))


def _metrics_record(*, scope: UsageScope, status: int, code: str) -> None:
    """The call in the Prometheus metrics (core/metrics.py), as its usage record says it ended."""
    tokens = scope.tokens
    call_observe(
        endpoint=scope.endpoint,
        model=scope.model_id,
        group=scope.group.pk if scope.group is not None else None,
        status=status,
        error_code=code,
        seconds=time.monotonic() - scope.started,
        charged=scope.charged,
        tokens=None if tokens is None else vars(tokens),  # the frozen dataclass's fields, read only
    )


def _reconnected() -> bool:
    try:
        return database_reconnect()
    except Exception:
        logger.exception("could not reconnect to the database")
        return False
