"""Billing fixtures: credentials, a subscription-billed model, a subscriber, and upstream stand-ins.

The upstream is the project's own boundary: `FakeUpstream` is what `metered_call` calls in place of
an adapter (it returns a value, raises UpstreamError, or blocks until told to answer).
"""

from __future__ import annotations

import itertools
import random
import threading
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import connection

from accounts.services import account_create, account_set_groups
from api.metering import metered_call
from api.usage import usage_scope
from billing.models import UsageRecord
from billing.subscriptions import subscription_upsert
from billing.usage import usage_record_build
from keys.credentials import Credential
from upstreams.providers.base import UpstreamError

_credential_ids = itertools.count(10_000)

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="needs PostgreSQL: real row locks and concurrent transactions (set DATABASE_URL)",
)


def credential_for(account, group=None) -> Credential:
    """A verified API key as authentication hands it on; a fresh id, so limit counters never collide."""
    return Credential(kind="api_key", id=next(_credential_ids), account=account, bound_group=group)


def billed_call(credential, group, model_id, price, call, *, request_id="req_1", now=None):
    """One billed call as the image pipeline makes it: a usage scope around metered_call."""
    with usage_scope(request_id=request_id, endpoint="images.generations", credential=credential) as usage:
        return metered_call(
            usage=usage,
            credential=credential,
            group=group,
            model_id=model_id,
            price=price,
            call=call,
            now=now,
        )


# The fixtures' models as billed_call names them: alpha_model (balance) and beta_model (subscription).
ALPHA_MODEL_ID, ALPHA_PRICE = "alpha-image-2", Decimal("0.15")
BETA_MODEL_ID, BETA_PRICE = "beta-imagine-image", Decimal("0.02")


def alpha_call(credential, group, call, **kwargs):
    """A billed call of alpha_model at its price."""
    return billed_call(credential, group, ALPHA_MODEL_ID, ALPHA_PRICE, call, **kwargs)


def beta_call(credential, group, call, **kwargs):
    """A billed call of beta_model at its price."""
    return billed_call(credential, group, BETA_MODEL_ID, BETA_PRICE, call, **kwargs)


def usage_record_draft(account, **fields) -> UsageRecord:
    """The usage record of a successful generation, built and not written (as a capture takes it);
    `fields` override its values."""
    values = {
        "request_id": "req_1",
        "credential": "api_key:1",
        "group_id": None,
        "model_id": "alpha-image-2",
        "endpoint": "images.generations",
        "billing": "balance",
        "status": 200,
        "error_code": "",
        "amount": Decimal("0"),
        "upstream": "demo",
        "latency_ms": 5,
        **fields,
    }
    return usage_record_build(account_id=account.pk, **values)


class FakeUpstream:
    """Stands in for the upstream call; counts its invocations (thread-safe)."""

    def __init__(self, *, result: object = "image", fail: bool = False, failure_rate: float = 0.0, seed=0):
        self.result = result
        self.fail = fail
        self.failure_rate = failure_rate
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.calls = 0
        self.successes = 0

    def __call__(self):
        with self._lock:
            self.calls += 1
            failing = self.fail or self._random.random() < self.failure_rate
            if not failing:
                self.successes += 1
        if failing:
            raise UpstreamError("upstream overloaded", status=503, retryable=True, sent=True)
        return self.result


@pytest.fixture(autouse=True)
def _clear_limit_counters():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def carol(beta_group):
    """A subscriber of Beta-API with an empty wallet."""
    account = account_create(username="carol", email="carol@example.com")
    account_set_groups(account=account, allowed_groups=[beta_group], current_group=beta_group)
    return account


def subscribe(
    account,
    group,
    *,
    daily=None,
    weekly=None,
    monthly=None,
    total=None,
    starts_at: datetime | None = None,
    expires_at: datetime | None = None,
    model_ids=None,
):
    subscription, _ = subscription_upsert(
        account=account,
        group=group,
        daily_limit=None if daily is None else Decimal(daily),
        weekly_limit=None if weekly is None else Decimal(weekly),
        monthly_limit=None if monthly is None else Decimal(monthly),
        total_limit=None if total is None else Decimal(total),
        starts_at=starts_at or datetime(2020, 1, 1, tzinfo=UTC),
        expires_at=expires_at,
        model_ids=model_ids,
    )
    return subscription


def run_concurrently(worker, count: int) -> list[tuple[str, object]]:
    """Run worker(i) in `count` real threads released together by a barrier.

    Returns ("ok", value) or ("error", exception) per thread, in index order. Each thread closes its
    own database connection, as a finished request thread would.
    """
    barrier = threading.Barrier(count)
    outcomes: list[tuple[str, object]] = [("missing", None)] * count

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            outcomes[index] = ("ok", worker(index))
        except BaseException as exc:  # the outcome is the test's subject, whatever it is
            outcomes[index] = ("error", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a worker thread hung"
    return outcomes
