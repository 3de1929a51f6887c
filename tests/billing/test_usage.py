"""The usage log: one record per billed call, purge after the retention, read-only in the admin."""

from __future__ import annotations

import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from api.usage import usage_scope
from billing.holds import hold_reserve
from billing.models import Hold, UsageRecord
from billing.usage import TOKEN_COUNT_MAX, TokenCounts, usage_record_insert
from core.errors import InvalidRequest
from core.modelutils import field_bounds
from tests.billing.conftest import credential_for, usage_record_draft
from upstreams.providers.base import UpstreamError

pytestmark = pytest.mark.django_db


def test_it_records_a_successful_call_with_target_upstream_and_latency(alice, alpha_group):
    credential = credential_for(alice)
    with usage_scope(request_id="req_ok", endpoint="images.generations", credential=credential) as usage:
        usage.set_target(group=alpha_group, model_id="alpha-image-2")
        usage.set_upstream("demo")
        usage.charged = Decimal("0.15")
    record = UsageRecord.objects.get()
    assert (record.request_id, record.account, record.credential, record.group, record.model_id) == (
        "req_ok",
        alice,
        credential.limit_key,
        alpha_group,
        "alpha-image-2",
    )
    assert (record.endpoint, record.status, record.error_code, record.amount, record.upstream) == (
        "images.generations",
        200,
        "",
        Decimal("0.1500"),
        "demo",
    )
    assert record.latency_ms >= 0


def test_it_records_a_refused_call_before_its_target_is_known(alice):
    with (
        pytest.raises(InvalidRequest),
        usage_scope(request_id="req_bad", endpoint="images.edits", credential=credential_for(alice)),
    ):
        raise InvalidRequest("prompt is required", code="missing_required_parameter")
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.group, record.model_id, record.amount) == (
        400,
        "missing_required_parameter",
        None,
        "",
        Decimal("0"),
    )


def test_it_records_an_unconverted_upstream_error_as_an_upstream_error(alice):
    with (
        pytest.raises(UpstreamError),
        usage_scope(request_id="req_up", endpoint="images.generations", credential=credential_for(alice)),
    ):
        raise UpstreamError("timed out", status=504, retryable=False, sent=True)
    assert UsageRecord.objects.values_list("status", "error_code").get() == (504, "upstream_error")


def test_a_token_count_is_taken_as_at_most_what_a_usage_record_holds():
    columns = (
        "input_tokens",
        "cached_tokens",
        "cache_write_tokens",
        "cache_write_1h_tokens",
        "output_tokens",
    )
    assert {field_bounds(getattr(UsageRecord, column).field)[1] for column in columns} == {TOKEN_COUNT_MAX}
    counts = TokenCounts(
        input=10**30, cached=2**31, cache_write=7, output=TOKEN_COUNT_MAX, cache_write_1h=10**4000
    )
    assert counts == TokenCounts(
        input=TOKEN_COUNT_MAX,
        cached=TOKEN_COUNT_MAX,
        cache_write=7,
        output=TOKEN_COUNT_MAX,
        cache_write_1h=TOKEN_COUNT_MAX,
    )


def test_purge_usage_deletes_only_records_older_than_the_retention(alice, settings):
    settings.GATEWAY_USAGE_RETENTION_DAYS = 30
    now = timezone.now()

    def record(age_days: float) -> UsageRecord:
        return usage_record_insert(
            record=usage_record_draft(
                alice,
                request_id=f"req_{age_days}",
                amount=Decimal("0.15"),
                latency_ms=10,
                created_at=now - timedelta(days=age_days),
            )
        )

    for age in (31, 45, 400):
        record(age)
    kept = [record(29.9), record(0)]
    out = io.StringIO()
    call_command("purge_usage", "--batch-size", "2", stdout=out)
    assert "Deleted 3 usage record(s) older than 30 days" in out.getvalue()
    assert set(UsageRecord.objects.values_list("pk", flat=True)) == {r.pk for r in kept}
    call_command("purge_usage", "--days", "1", stdout=io.StringIO())
    assert list(UsageRecord.objects.values_list("pk", flat=True)) == [kept[1].pk]


def test_staff_read_the_usage_log_with_filters_but_cannot_change_it(staff_client, alice, alpha_group):
    with usage_scope(
        request_id="req_adm", endpoint="images.generations", credential=credential_for(alice)
    ) as u:
        u.set_target(group=alpha_group, model_id="alpha-image-2")
    url = reverse("admin:billing_usagerecord_changelist")
    page = staff_client.get(url, {"status__exact": "200", "model_id": "alpha-image-2"})
    assert page.status_code == 200
    assert b"req_adm" in page.content
    record = UsageRecord.objects.get()
    assert staff_client.get(reverse("admin:billing_usagerecord_add")).status_code == 403
    assert staff_client.post(reverse("admin:billing_usagerecord_delete", args=[record.pk])).status_code == 403
    assert UsageRecord.objects.count() == 1


def test_staff_release_stale_holds_from_the_admin(staff_client, alice):
    stale = hold_reserve(
        account_id=alice.pk,
        amount=Decimal("1"),
        reference="req_stale",
        now=timezone.now() - timedelta(hours=1),
    )
    fresh = hold_reserve(account_id=alice.pk, amount=Decimal("1"), reference="req_fresh")
    url = reverse("admin:billing_hold_changelist")
    assert staff_client.get(url).status_code == 200
    selection = {"action": "release_stale", "_selected_action": [stale.pk, fresh.pk]}
    confirm = staff_client.post(url, selection)
    assert b"Yes, confirm" in confirm.content
    assert Hold.objects.get(pk=stale.pk).status == Hold.Status.OPEN  # nothing before confirming
    response = staff_client.post(url, {**selection, "confirmed": "yes"}, follow=True)
    assert b"Released 1 stale hold(s)." in response.content
    assert Hold.objects.get(pk=stale.pk).status == Hold.Status.EXPIRED
    assert Hold.objects.get(pk=fresh.pk).status == Hold.Status.OPEN
    alice.wallet.refresh_from_db()
    assert alice.wallet.held == Decimal("1.0000")


@pytest.mark.parametrize(
    "name", ["hold", "subscriptionusage", "usagerecord", "idempotencyrecord", "subscription", "wallet"]
)
def test_the_billing_admin_pages_load(staff_client, alice, name):
    assert staff_client.get(reverse(f"admin:billing_{name}_changelist")).status_code == 200
