"""Idempotency-Key: one execution per (account, key, request) within its lifetime; replays, 409, 422."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.utils import timezone

from api.answers import REPLAY_HEADER, StoredResponse
from api.errors import api_error_for
from api.idempotency import idempotent_answer
from api.metering import metered_call
from api.usage import usage_scope
from billing.errors import IdempotencyKeyInUse, IdempotencyKeyInvalid, IdempotencyKeyReused
from billing.holds import hold_capture, hold_reserve
from billing.idempotency import (
    KeptAnswer,
    idempotency_fingerprint,
    idempotency_records_purge,
    idempotent_execute,
)
from billing.ledger import wallet_top_up
from billing.models import IdempotencyRecord, LedgerEntry
from core.errors import ApiError
from tests.billing.conftest import FakeUpstream, credential_for

pytestmark = pytest.mark.django_db

FP = idempotency_fingerprint(parts=(b"POST", b"/v1/images/generations", b'{"prompt":"cat"}'))


class Producer:
    def __init__(self, *, status: int = 200, fail: bool = False):
        self.calls = 0
        self.status = status
        self.fail = fail

    def __call__(self) -> StoredResponse:
        self.calls += 1
        if self.fail:
            raise ApiError("upstream failed", status=502, type="upstream_error", code="upstream_error")
        return StoredResponse(
            status=self.status,
            body=f'{{"n": {self.calls}}}'.encode(),
            content_type="application/json",
            headers={"X-Thing": "1"},
        )


def test_without_a_key_it_just_produces(alice):
    producer = Producer()
    idempotent_answer(account=alice, key=None, fingerprint=FP, produce=producer)
    idempotent_answer(account=alice, key=None, fingerprint=FP, produce=producer)
    assert producer.calls == 2
    assert not IdempotencyRecord.objects.exists()


def test_it_replays_the_first_response_without_producing_again(alice):
    producer = Producer()
    first = idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer)
    again = idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer)
    assert producer.calls == 1
    assert (again.status, again.body, again.content_type) == (first.status, first.body, first.content_type)
    assert again.headers == {"X-Thing": "1", REPLAY_HEADER: "true"}


def test_keys_are_per_account(alice, bob):
    producer = Producer()
    idempotent_answer(account=alice, key="shared", fingerprint=FP, produce=producer)
    idempotent_answer(account=bob, key="shared", fingerprint=FP, produce=producer)
    assert producer.calls == 2


def test_the_same_key_with_another_body_is_422(alice):
    idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=Producer())
    other = idempotency_fingerprint(parts=(b"POST", b"/v1/images/generations", b'{"prompt":"dog"}'))
    with pytest.raises(IdempotencyKeyReused) as refused:
        idempotent_answer(account=alice, key="k-1", fingerprint=other, produce=Producer())
    answered = api_error_for(refused.value)
    assert (answered.status, answered.type, answered.code) == (
        422,
        "invalid_request_error",
        "idempotency_key_reused",
    )


def test_a_key_still_in_progress_is_409(alice):
    seen = []

    def produce():
        with pytest.raises(IdempotencyKeyInUse) as busy:
            idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=Producer())
        seen.append(busy.value)
        return StoredResponse(status=200, body=b"{}", content_type="application/json", headers={})

    idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=produce)
    assert (api_error_for(seen[0]).status, seen[0].code) == (409, "idempotency_key_in_use")


def test_a_failed_first_attempt_frees_the_key_for_the_retry(alice):
    with pytest.raises(ApiError):
        idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=Producer(fail=True))
    assert not IdempotencyRecord.objects.exists()
    producer = Producer()
    idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer)
    assert producer.calls == 1


def test_a_non_2xx_response_is_not_stored(alice):
    idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=Producer(status=503))
    producer = Producer()
    assert idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer).status == 200
    assert producer.calls == 1


def test_a_key_expires_after_its_lifetime(alice):
    now = timezone.now()
    producer = Producer()
    idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer, now=now)
    later = now + timedelta(seconds=settings.GATEWAY_IDEMPOTENCY_TTL_SECONDS - 1)
    idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer, now=later)
    assert producer.calls == 1
    expired = now + timedelta(seconds=settings.GATEWAY_IDEMPOTENCY_TTL_SECONDS)
    assert idempotency_records_purge(now=later) == 0
    idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer, now=expired)
    assert producer.calls == 2
    assert idempotency_records_purge(now=expired + timedelta(days=2)) == 1


def test_a_key_abandoned_by_a_killed_worker_is_taken_over_after_the_hold_ttl(alice):
    now = timezone.now()
    # A worker claimed the key, then died: the row stays in progress.
    IdempotencyRecord.objects.create(
        account=alice,
        key="k-1",
        fingerprint=FP,
        owner="dead-worker",
        locked_until=now + timedelta(seconds=settings.GATEWAY_HOLD_TTL_SECONDS),
        created_at=now,
        expires_at=now + timedelta(days=1),
    )
    with pytest.raises(IdempotencyKeyInUse):
        idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=Producer(), now=now)
    producer = Producer()
    later = now + timedelta(seconds=settings.GATEWAY_HOLD_TTL_SECONDS + 1)
    result = idempotent_answer(account=alice, key="k-1", fingerprint=FP, produce=producer, now=later)
    assert (producer.calls, result.status) == (1, 200)
    assert IdempotencyRecord.objects.get().status == IdempotencyRecord.Status.COMPLETED


@pytest.mark.parametrize("key", ["", "x" * 256, "naïve", "tab\there", "new\nline"])
def test_it_refuses_a_malformed_key(alice, key):
    with pytest.raises(IdempotencyKeyInvalid) as refused:
        idempotent_answer(account=alice, key=key, fingerprint=FP, produce=Producer())
    assert (api_error_for(refused.value).status, refused.value.code) == (400, "invalid_idempotency_key")


def test_it_accepts_any_printable_ascii_key(alice):
    key = "".join(chr(c) for c in range(0x20, 0x7F))
    idempotent_answer(account=alice, key=key, fingerprint=FP, produce=Producer())


def test_the_fingerprint_tells_apart_any_two_sequences_of_parts():
    prints = {
        idempotency_fingerprint(parts=(b"POST", b"/v1/images/generations", b"{}")),
        idempotency_fingerprint(parts=(b"POST", b"/v1/images/edits", b"{}")),
        idempotency_fingerprint(parts=(b"PUT", b"/v1/images/generations", b"{}")),
        idempotency_fingerprint(parts=(b"POST", b"/v1/images/generations", b"{ }")),
        idempotency_fingerprint(parts=(b"POST", b"/v1/images/generation", b"s{}")),
        idempotency_fingerprint(parts=(b"POST", b"/v1/images/generations{}")),
        idempotency_fingerprint(parts=(b"POST", b"/v1/images/generations", b"{}", b"")),
        idempotency_fingerprint(parts=(b"field", b"prompt", b"a\nsize=64x64")),
        idempotency_fingerprint(parts=(b"field", b"prompt", b"a", b"field", b"size", b"64x64")),
    }
    assert len(prints) == 9


def test_a_replay_does_not_charge_again(alice, alpha_group, alpha_model):
    upstream = FakeUpstream(result=b'{"data":[]}')
    credential = credential_for(alice)

    def produce():
        with usage_scope(request_id="req_1", endpoint="images.generations", credential=credential) as usage:
            body = metered_call(
                usage=usage,
                credential=credential,
                group=alpha_group,
                model_id="alpha-image-2",
                price=Decimal("0.15"),
                call=upstream,
            )
        return StoredResponse(status=200, body=body, content_type="application/json", headers={})

    for _ in range(3):
        idempotent_answer(account=alice, key="pay-once", fingerprint=FP, produce=produce)
    alice.wallet.refresh_from_db()
    assert (upstream.calls, alice.wallet.balance) == (1, Decimal("9.8500"))


def test_a_call_charged_then_failing_keeps_its_key(alice, alpha_model, alpha_group):
    credential = credential_for(alice)
    upstream = FakeUpstream()

    def produce():
        with usage_scope(request_id="req_1", endpoint="images.generations", credential=credential) as usage:
            metered_call(
                usage=usage,
                credential=credential,
                group=alpha_group,
                model_id="alpha-image-2",
                price=Decimal("0.15"),
                call=upstream,
            )
            raise RuntimeError("the worker is stopped after the capture")

    with pytest.raises(RuntimeError):
        idempotent_answer(account=alice, key="charged", fingerprint=FP, produce=produce)
    retry = idempotent_answer(account=alice, key="charged", fingerprint=FP, produce=produce)

    alice.wallet.refresh_from_db()
    assert (upstream.calls, alice.wallet.balance) == (1, Decimal("9.8500"))
    assert (retry.status, retry.headers[REPLAY_HEADER]) == (500, "true")
    assert b"idempotent_answer_lost" in retry.body


def test_a_key_whose_dead_worker_had_charged_its_call_is_not_run_again(alice):
    now = timezone.now()
    # A worker claimed the key, charged its call (hold captured), then died before answering.
    IdempotencyRecord.objects.create(
        account=alice,
        key="k-1",
        fingerprint=FP,
        owner="dead-worker",
        reference="req-dead",
        locked_until=now + timedelta(seconds=settings.GATEWAY_HOLD_TTL_SECONDS),
        created_at=now,
        expires_at=now + timedelta(days=1),
    )
    hold_capture(hold=hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req-dead"))
    producer = Producer()
    later = now + timedelta(seconds=settings.GATEWAY_HOLD_TTL_SECONDS + 1)

    result = idempotent_answer(
        account=alice, key="k-1", fingerprint=FP, produce=producer, reference="req-retry", now=later
    )

    assert producer.calls == 0
    assert result.status == 500 and b"idempotent_answer_lost" in result.body
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert IdempotencyRecord.objects.get().status == IdempotencyRecord.Status.COMPLETED


def _top_up_answering(account, status: int):
    def produce() -> StoredResponse:
        wallet_top_up(account=account, amount="5.00", reference="in-transaction")
        return StoredResponse(status=status, body=b"{}", content_type="application/json")

    return produce


def test_in_transaction_the_work_and_the_keys_completion_commit_together(alice):
    answer = idempotent_answer(
        account=alice, key="tx-1", fingerprint="f", produce=_top_up_answering(alice, 201), in_transaction=True
    )

    assert answer.status == 201
    assert IdempotencyRecord.objects.get(key="tx-1").status == IdempotencyRecord.Status.COMPLETED
    assert LedgerEntry.objects.filter(reference="in-transaction").count() == 1


def test_in_transaction_a_failed_answer_rolls_the_work_back_and_frees_the_key(alice):
    answer = idempotent_answer(
        account=alice, key="tx-2", fingerprint="f", produce=_top_up_answering(alice, 409), in_transaction=True
    )

    assert answer.status == 409
    assert not IdempotencyRecord.objects.filter(key="tx-2").exists()
    assert not LedgerEntry.objects.filter(reference="in-transaction").exists()


def test_in_transaction_a_key_taken_over_meanwhile_keeps_the_work_from_committing(alice):
    def produce() -> StoredResponse:
        wallet_top_up(account=alice, amount="5.00", reference="in-transaction")
        IdempotencyRecord.objects.filter(key="tx-3").update(owner="someone-else")  # a takeover
        return StoredResponse(status=201, body=b"{}", content_type="application/json")

    with pytest.raises(IdempotencyKeyInUse):
        idempotent_answer(account=alice, key="tx-3", fingerprint="f", produce=produce, in_transaction=True)

    assert not LedgerEntry.objects.filter(reference="in-transaction").exists()


def test_billing_keeps_and_replays_the_answer_as_plain_data(alice):
    lost = KeptAnswer(status=500, body=b"lost", content_type="text/plain")
    first = KeptAnswer(status=201, body=b"made", content_type="text/plain", headers={"X-Thing": "1"})

    made = idempotent_execute(
        account=alice, key="plain", fingerprint=FP, produce=lambda: first, answer_lost=lost
    )
    again = idempotent_execute(
        account=alice, key="plain", fingerprint=FP, produce=lambda: first, answer_lost=lost
    )

    assert (made.replayed, again.replayed) == (False, True)
    assert (again.status, again.body, again.content_type, again.headers) == (
        201,
        b"made",
        "text/plain",
        {"X-Thing": "1"},
    )
    record = IdempotencyRecord.objects.get(key="plain")
    assert (record.response_status, bytes(record.response_body), record.response_headers) == (
        201,
        b"made",
        {"X-Thing": "1"},
    )
