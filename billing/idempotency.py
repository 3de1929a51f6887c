"""Idempotency keys on billed POSTs, as Stripe does them.

The same `Idempotency-Key` from the same account with the same request (method, path and body) within
GATEWAY_IDEMPOTENCY_TTL_SECONDS gets the first response again: no second upstream call, no second
charge. While the first is still running: 409 idempotency_key_in_use. The same key with another
request: 422 idempotency_key_reused. Only 2xx responses are stored; a failed first attempt leaves the
key free for the retry, unless it was charged before it failed: then the key is kept and answers
500 idempotent_answer_lost (replayed), so that a retry never charges twice.

What a key keeps is plain data (`KeptAnswer`: status, headers, body bytes); api.idempotency turns
it into the HTTP answer and gives the answer a charged-then-lost call keeps. The refusals are
billing's domain errors (billing/errors.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, transaction
from django.utils import timezone

from accounts.models import Account
from accounts.snapshots import AccountSnapshot
from billing.errors import IdempotencyKeyInUse, IdempotencyKeyInvalid, IdempotencyKeyReused
from billing.models import Hold, IdempotencyRecord
from core.db import database_reconnect, session_ended_before_statement
from core.modelutils import queryset_delete_in_batches

logger = logging.getLogger("gateway.idempotency")

MAX_KEY_LENGTH = 255
# Claiming races with a row that is deleted (failed first attempt) or expires under us: try again a
# few times, then give up with 409 rather than loop.
CLAIM_ATTEMPTS = 5


@dataclass(frozen=True)
class KeptAnswer:
    """A call's answer as an idempotency key keeps it: its status, body bytes, content type and
    headers. `replayed`: this is the key's first answer given again, not a new call's."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)
    replayed: bool = False


def idempotency_fingerprint(*, parts: Iterable[bytes]) -> str:
    """A hash of what makes two requests "the same" for an idempotency key: `parts` in their order
    (what is asked, of whom, the request's content as it is read), each after its length, so that no
    two different sequences of parts hash alike."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def idempotency_key_validate(*, key: str) -> str:
    """1 to 255 printable ASCII characters (space to ~); else IdempotencyKeyInvalid."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not all(" " <= ch <= "~" for ch in key):
        raise IdempotencyKeyInvalid(
            f"The Idempotency-Key header must be 1 to {MAX_KEY_LENGTH} printable ASCII characters."
        )
    return key


def idempotent_execute(
    *,
    account: Account | AccountSnapshot,
    key: str | None,
    fingerprint: str,
    produce: Callable[[], KeptAnswer],
    answer_lost: KeptAnswer,
    reference: str = "",
    now: datetime | None = None,
    in_transaction: bool = False,
) -> KeptAnswer:
    """Run `produce` at most once per (account, key) while the key lives, and replay its answer.

    `in_transaction`: for a `produce` that only writes the database (a top-up), it runs in one
    transaction with the key's completion, so a process killed between the two leaves neither: the
    key is then taken over after locked_until and runs once. A non-2xx answer rolls `produce`'s
    writes back and frees the key.

    `reference` is the call's request id, its hold's reference: a key whose worker died mid-call is
    taken over after locked_until only when that call was not charged; if it was, the key answers
    `answer_lost`, as below.

    `fingerprint` identifies the request; a later request with the key must match it. Without a key
    it is not used (callers may pass "" rather than compute it).

    Exactly one of several concurrent requests with one key claims it (the unique (account, key) row
    it inserts); the others get IdempotencyKeyInUse while it runs and its kept answer once it is
    done. If `produce` raises or answers non-2xx without having been charged, the claim is removed, so
    a retry runs again; if it was charged (`idempotency_charge_note`), the key is completed instead (a
    raise: with `answer_lost`), so a retry is never charged a second time.
    """
    if key is None:
        return produce()
    idempotency_key_validate(key=key)
    claim = functools.partial(
        _claim,
        account=account,
        key=key,
        fingerprint=fingerprint,
        reference=reference,
        now=now or timezone.now(),
        answer_lost=answer_lost,
    )
    try:
        record = claim()
    except (OperationalError, InterfaceError) as exc:
        # A connection PostgreSQL had ended (a restart): the claim did not run; once more, fresh.
        if not session_ended_before_statement(exc) or not database_reconnect():
            raise
        record = claim()
    if isinstance(record, KeptAnswer):
        return record
    if in_transaction:
        return _execute_in_transaction(record=record, produce=produce)
    charges: list[bool] = []
    noted = _charged.set(charges)
    try:
        response = produce()
    except BaseException:
        if charges:
            # Charged, then failed: the key must not run the call again (a second charge).
            _complete(record=record, response=answer_lost)
        else:
            _unclaim(record=record)
        raise
    finally:
        _charged.reset(noted)
    if not 200 <= response.status < 300:
        if charges:
            _complete(record=record, response=response)
        else:
            _unclaim(record=record)
        return response
    _complete(record=record, response=response)
    return response


def _execute_in_transaction(*, record: IdempotencyRecord, produce: Callable[[], KeptAnswer]) -> KeptAnswer:
    try:
        with transaction.atomic():
            response = produce()
            if not 200 <= response.status < 300:
                transaction.set_rollback(True)
            elif not _completed(record=record, response=response):
                # Taken over meanwhile (we ran past locked_until): the new owner runs it, not us.
                raise _key_in_use()
    except BaseException:
        _unclaim(record=record)
        raise
    if not 200 <= response.status < 300:
        _unclaim(record=record)
    return response


# Set by idempotent_execute around `produce`; the metered call's capture appends to it. A context
# variable, so each thread and each gevent greenlet sees its own call's.
_charged: ContextVar[list[bool] | None] = ContextVar("igw_idempotency_charged", default=None)


def idempotency_charge_note() -> None:
    """Say that the call running under the current `idempotent_execute` has been charged: its key is
    then never freed, whatever happens after (api.metering calls it on every capture)."""
    charges = _charged.get()
    if charges is not None:
        charges.append(True)


def _key_in_use() -> IdempotencyKeyInUse:
    return IdempotencyKeyInUse(
        "A request with this Idempotency-Key is still being processed. Retry after it has finished.",
        retry_after=1,
    )


def _complete(*, record: IdempotencyRecord, response: KeptAnswer) -> None:
    """Store the response for replays. Only the current owner may complete the row: a row taken over
    from us (we ran past locked_until) belongs to the new owner. Never raises: the call has run; a row
    left in progress answers 409 until locked_until."""
    try:
        _completed(record=record, response=response)
    except Exception:
        logger.exception("could not store the response of idempotency record %s", record.pk)


def _completed(*, record: IdempotencyRecord, response: KeptAnswer) -> bool:
    """Complete the row if we still own it; False when it was taken over."""
    return bool(
        IdempotencyRecord.objects.filter(
            pk=record.pk, owner=record.owner, status=IdempotencyRecord.Status.IN_PROGRESS
        ).update(
            status=IdempotencyRecord.Status.COMPLETED,
            response_status=response.status,
            response_body=response.body,
            response_content_type=response.content_type,
            response_headers=dict(response.headers),
        )
    )


def _claim(
    *,
    account: Account | AccountSnapshot,
    key: str,
    fingerprint: str,
    reference: str,
    now: datetime,
    answer_lost: KeptAnswer,
) -> IdempotencyRecord | KeptAnswer:
    owner = uuid.uuid4().hex
    locked_until = now + timedelta(seconds=settings.GATEWAY_HOLD_TTL_SECONDS)
    for _ in range(CLAIM_ATTEMPTS):
        try:
            # The unique (account, key) constraint decides the owner: a concurrent insert of the same
            # key waits for ours to commit and then fails here.
            with transaction.atomic():
                return IdempotencyRecord.objects.create(
                    account_id=account.pk,
                    key=key,
                    fingerprint=fingerprint,
                    owner=owner,
                    reference=reference[:200],
                    locked_until=locked_until,
                    created_at=now,
                    expires_at=now + timedelta(seconds=settings.GATEWAY_IDEMPOTENCY_TTL_SECONDS),
                )
        except IntegrityError:
            pass
        existing = IdempotencyRecord.objects.filter(account_id=account.pk, key=key).first()
        if existing is None:
            continue  # the first attempt failed and freed the key: claim it again
        if existing.expires_at <= now:
            # An expired key is free again; the guarded delete lets one claimer remove it.
            IdempotencyRecord.objects.filter(pk=existing.pk, expires_at__lte=now).delete()
            continue
        if existing.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                "This Idempotency-Key was already used with a different request. Use a new key for "
                "a new request."
            )
        if existing.status == IdempotencyRecord.Status.COMPLETED:
            return KeptAnswer(
                status=existing.response_status or 200,
                body=bytes(existing.response_body or b""),
                content_type=existing.response_content_type,
                headers=dict(existing.response_headers or {}),
                replayed=True,
            )
        if existing.locked_until <= now:
            # Its worker died mid-call (it would have finished or failed by now). If that call was
            # charged (its hold captured), it must not run again: the key answers "answer lost".
            if existing.reference and _reference_charged(reference=existing.reference):
                _complete(record=existing, response=answer_lost)
                continue  # replayed by the next round
            # Not charged: take the row over, guarded by the old owner, so of several takers exactly
            # one wins.
            taken = IdempotencyRecord.objects.filter(
                pk=existing.pk, owner=existing.owner, status=IdempotencyRecord.Status.IN_PROGRESS
            ).update(owner=owner, locked_until=locked_until, reference=reference[:200])
            if taken == 1:
                existing.owner, existing.locked_until, existing.reference = owner, locked_until, reference
                return existing
            continue
        break
    raise _key_in_use()


def _reference_charged(*, reference: str) -> bool:
    """Was the call with this request id charged (or counted, on a subscription)?"""
    return Hold.objects.filter(reference=reference, status=Hold.Status.CAPTURED).exists()


def _unclaim(*, record: IdempotencyRecord) -> None:
    try:
        IdempotencyRecord.objects.filter(
            pk=record.pk, owner=record.owner, status=IdempotencyRecord.Status.IN_PROGRESS
        ).delete()
    except Exception:
        # The row then blocks the key until locked_until, after which a retry takes it over.
        logger.exception("could not free idempotency key of record %s", record.pk)


def idempotency_records_purge(*, now: datetime | None = None, batch_size: int = 5000) -> int:
    """Delete expired idempotency records, in batches. Returns how many were deleted."""
    moment = now or timezone.now()
    return queryset_delete_in_batches(
        IdempotencyRecord.objects.filter(expires_at__lte=moment), batch_size=batch_size
    )
