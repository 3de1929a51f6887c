"""The Overview page: balance and holds, groups, subscription caps, spend per day, latest calls."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from billing.holds import hold_capture, hold_reserve
from billing.ledger import wallet_top_up
from billing.models import LedgerEntry
from billing.subscriptions import subscription_hold_reserve, subscription_upsert
from billing.usage import TokenCounts, usage_record_build, usage_record_insert
from console.queries import spend_per_day_for_account


def _call(
    account,
    request_id: str,
    *,
    amount: str = "0.15",
    status: int = 200,
    credential: str = "",
    endpoint: str = "images.generations",
    tokens: TokenCounts | None = None,
) -> None:
    usage_record_insert(
        record=usage_record_build(
            request_id=request_id,
            account_id=account.pk,
            credential=credential or f"console:{account.pk}",
            group_id=None,
            model_id="alpha-image-2" if tokens is None else "alpha-chat",
            endpoint=endpoint,
            billing="balance",
            status=status,
            error_code="" if status == 200 else "INSUFFICIENT_BALANCE",
            amount=Decimal(amount),
            upstream="demo",
            latency_ms=12,
            tokens=tokens,
        )
    )


def _charge(account, amount: str, reference: str, *, reserved: str | None = None) -> LedgerEntry:
    """A charge of `amount`; with `reserved`, a per-token call: the hold reserves more, the capture
    charges the exact cost."""
    hold = hold_reserve(account_id=account.pk, amount=Decimal(reserved or amount), reference=reference)
    assert hold_capture(hold=hold, amount=Decimal(amount) if reserved else None)
    return LedgerEntry.objects.get(reference=reference, kind=LedgerEntry.Kind.CHARGE)


def test_it_shows_balance_open_holds_and_available(alice_client, alice):
    hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_in_flight")

    response = alice_client.get("/console/")

    assert response.status_code == 200
    assert response.context["wallet"].open_holds == 1
    html = response.content.decode()
    assert '<dd data-testid="balance">¥10.00</dd>' in html
    assert "¥0.15" in html and "(1 open hold)" in html
    assert '<dd data-testid="available">¥9.85</dd>' in html


def test_it_shows_the_current_and_allowed_groups(alice_client, alice, beta_group):
    alice.allowed_groups.add(beta_group)

    response = alice_client.get("/console/")

    html = response.content.decode()
    assert '<strong data-testid="current-group">Alpha-Image</strong>' in html
    assert '<th scope="row">Alpha-Image</th>' in html
    assert '<th scope="row">Beta-API</th>' in html


def test_it_shows_how_much_of_each_cap_this_window_used(alice_client, alice, beta_group):
    subscription, _ = subscription_upsert(
        account=alice,
        group=beta_group,
        daily_limit=Decimal("1.00"),
        weekly_limit=None,
        monthly_limit=Decimal("10.00"),
        total_limit=None,
        starts_at=timezone.now() - timedelta(days=1),
        expires_at=None,
    )
    for number in range(5):
        subscription_hold_reserve(
            subscription=subscription, amount=Decimal("0.02"), reference=f"req_{number}"
        )

    response = alice_client.get("/console/")

    [state] = response.context["subscriptions"]
    assert state.state == "active"
    assert [(cap.label, cap.used, cap.cap, cap.percent) for cap in state.caps] == [
        ("Today", Decimal("0.10"), Decimal("1.00"), 10),
        ("This month", Decimal("0.10"), Decimal("10.00"), 1),
    ]
    html = response.content.decode()
    assert "Beta-API" in html and "¥0.10" in html and "¥1.00" in html
    assert 'value="10"' in html


def test_it_charts_the_spend_of_the_last_30_days(alice_client, alice):
    _charge(alice, "0.15", "req_a")
    _charge(alice, "0.15", "req_b")

    response = alice_client.get("/console/")

    chart = response.context["chart"]
    assert len(chart.bars) == 30
    assert chart.bars[-1].label == "¥0.30"
    assert chart.bars[-1].height > 0
    assert all(bar.height == 0 for bar in chart.bars[:-1])
    html = response.content.decode()
    assert '<svg role="img" aria-labelledby="spend-title spend-desc"' in html
    assert '<strong data-testid="spend-total">¥0.30</strong>' in html


def test_spend_per_day_groups_by_the_gateway_timezone(alice, settings):
    settings.GATEWAY_TIMEZONE = "Asia/Shanghai"  # UTC+8: 20:00 UTC is already the next local day
    now = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
    late = _charge(alice, "0.15", "req_late")
    early = _charge(alice, "0.02", "req_early")
    old = _charge(alice, "1.00", "req_old")
    LedgerEntry.objects.filter(pk=late.pk).update(created_at=datetime(2025, 3, 8, 20, 0, tzinfo=UTC))
    LedgerEntry.objects.filter(pk=early.pk).update(created_at=datetime(2025, 3, 8, 10, 0, tzinfo=UTC))
    LedgerEntry.objects.filter(pk=old.pk).update(created_at=datetime(2025, 2, 1, 10, 0, tzinfo=UTC))

    days = spend_per_day_for_account(account=alice, now=now)

    assert len(days) == 30
    assert days[0].day == date(2025, 2, 9) and days[-1].day == date(2025, 3, 10)
    spent = {day.day: day.amount for day in days if day.amount}
    assert spent == {date(2025, 3, 8): Decimal("0.02"), date(2025, 3, 9): Decimal("0.15")}


def test_it_lists_the_accounts_latest_calls_only(alice_client, alice, bob):
    _call(alice, "req_alice_ok")
    _call(alice, "req_alice_refused", amount="0", status=403)
    _call(bob, "req_bob_secret")

    response = alice_client.get("/console/")

    html = response.content.decode()
    assert "req_alice_ok" in html and "req_alice_refused" in html
    assert "req_bob_secret" not in html
    rows = response.context["calls"]
    assert [row.record.request_id for row in rows] == ["req_alice_refused", "req_alice_ok"]
    assert rows[1].amount == "¥0.15" and rows[1].via == "Playground"
    assert "INSUFFICIENT_BALANCE" in html


def test_it_names_the_key_a_call_came_through(alice_client, alice, alice_key):
    api_key, _ = alice_key
    _call(alice, "req_by_key", credential=f"api_key:{api_key.pk}")

    response = alice_client.get("/console/")

    assert response.context["calls"][0].via == f"{api_key.prefix}… alice laptop"


def test_it_shows_amounts_with_at_most_eight_places_and_no_trailing_zeros(alice_client, alice):
    wallet_top_up(account=alice, amount=Decimal("23.08"))
    _charge(alice, "0.000024", "req_tokens", reserved="0.01")

    response = alice_client.get("/console/")

    html = response.content.decode()
    assert '<dd data-testid="balance">¥33.079976</dd>' in html
    assert '<dd data-testid="available">¥33.079976</dd>' in html
    assert '<dd data-testid="held">¥0.00' in html
    assert "00000" not in html and "0E-" not in html


def test_it_shows_a_text_calls_tokens_and_cost_beside_image_calls(alice_client, alice):
    _call(alice, "req_image")
    _call(
        alice,
        "req_chat",
        amount="0.000024",
        endpoint="chat.completions",
        tokens=TokenCounts(input=1234, output=56),
    )
    _call(
        alice,
        "req_messages",
        amount="0.0031",
        endpoint="messages",
        tokens=TokenCounts(input=12, cached=2048, cache_write=300, output=7),
    )

    response = alice_client.get("/console/")

    rows = {row.record.request_id: row for row in response.context["calls"]}
    assert (rows["req_image"].tokens, rows["req_image"].amount) == ("", "¥0.15")
    assert (rows["req_chat"].tokens, rows["req_chat"].amount) == ("1,234 in · 56 out", "¥0.000024")
    assert rows["req_messages"].tokens == "12 in · 2,048 cached · 300 cache write · 7 out"
    html = response.content.decode()
    assert (
        '<span class="cut tokens" title="1,234 input tokens (uncached), 0 cached input tokens, '
        '0 cache-write tokens, 56 output tokens">1,234 in · 56 out</span>'
    ) in html
    assert "¥0.000024" in html and "¥0.0031" in html
    assert '<span class="cut endpoint" title="chat.completions">chat.completions</span>' in html
    assert '<span class="cut endpoint" title="messages">messages</span>' in html


def test_it_charts_per_token_charges_exactly(alice_client, alice):
    for number in range(3):
        _charge(alice, "0.000024", f"req_{number}", reserved="0.01")
    _charge(alice, "0.15", "req_image")

    response = alice_client.get("/console/")

    days = spend_per_day_for_account(account=alice)
    assert days[-1].amount == Decimal("0.150072")
    chart = response.context["chart"]
    assert chart.bars[-1].label == "¥0.150072"
    html = response.content.decode()
    assert '<strong data-testid="spend-total">¥0.150072</strong>' in html


def test_it_charts_a_day_of_tiny_charges_as_a_visible_bar(alice_client, alice):
    _charge(alice, "0.00000001", "req_tiny", reserved="0.01")

    response = alice_client.get("/console/")

    chart = response.context["chart"]
    assert chart.bars[-1].label == "¥0.00000001" and chart.bars[-1].height > 0
    assert chart.peak_label == chart.total_label == "¥0.00000001"
    assert chart.bars[0].label == "¥0.00"


def test_it_shows_caps_and_their_use_to_the_fraction_of_a_fen(alice_client, alice, beta_group):
    subscription, _ = subscription_upsert(
        account=alice,
        group=beta_group,
        daily_limit=Decimal("0.5"),
        weekly_limit=None,
        monthly_limit=None,
        total_limit=None,
        starts_at=timezone.now() - timedelta(days=1),
        expires_at=None,
    )
    hold = subscription_hold_reserve(subscription=subscription, amount=Decimal("0.01"), reference="req_1")
    assert hold_capture(hold=hold, amount=Decimal("0.000024"))

    response = alice_client.get("/console/")

    [cap] = response.context["subscriptions"][0].caps
    assert (cap.used_shown, cap.cap_shown) == ("¥0.000024", "¥0.50")


def test_it_stacks_each_days_spend_by_model(alice_client, alice):
    _charge(alice, "0.15", "req_image_1")
    _call(alice, "req_image_1")
    _charge(alice, "0.15", "req_image_2")
    _call(alice, "req_image_2")
    _charge(alice, "0.000024", "req_chat", reserved="0.01")
    _call(alice, "req_chat", amount="0.000024", tokens=TokenCounts(input=10, output=2))
    _charge(alice, "0.05", "req_no_record")  # a charge without a usage record of the account

    response = alice_client.get("/console/")

    chart = response.context["chart"]
    assert [(entry.model, entry.total_label) for entry in chart.legend] == [
        ("alpha-image-2", "¥0.30"),
        ("other charges", "¥0.05"),
        ("alpha-chat", "¥0.000024"),
    ]
    today = chart.bars[-1]
    assert today.label == "¥0.350024"
    assert [(segment.model, segment.label) for segment in today.segments] == [
        ("alpha-image-2", "¥0.30"),
        ("other charges", "¥0.05"),
        ("alpha-chat", "¥0.000024"),
    ]
    assert abs(sum(segment.height for segment in today.segments) - today.height) < 0.05
    assert round(today.segments[-1].y, 1) == round(today.y, 1)  # stacked up to the bar's top
    assert all(not bar.segments for bar in chart.bars[:-1])
    html = response.content.decode()
    assert 'data-testid="spend-legend"' in html and "alpha-image-2: ¥0.30" in html
