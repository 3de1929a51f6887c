"""Money for people (billing.money.money_display): at least two and at most eight places, trailing
zeros trimmed, never exponent notation; the API's fixed places (money_str) stay as they are."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.money import money_display, money_parse, money_str, money_trimmed


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        ("0.000024", "¥0.000024"),  # 12 tokens at ¥2 per million: never rounded to ¥0.00
        ("33.08000000", "¥33.08"),
        ("0", "¥0.00"),
        ("0E-8", "¥0.00"),
        ("-0.00000000", "¥0.00"),
        ("-5.00000000", "-¥5.00"),  # an adjustment taking money back
        ("-0.000024", "-¥0.000024"),
        ("0.00000001", "¥0.00000001"),
        ("1234.5", "¥1234.50"),
        ("10", "¥10.00"),
    ],
)
def test_it_shows_between_two_and_eight_places(amount, shown):
    assert money_display(Decimal(amount)) == shown


def test_it_offers_an_amount_for_editing_trimmed_without_the_currency():
    assert money_trimmed(Decimal("1.50000000")) == "1.50"
    assert money_trimmed(Decimal("-0.00012300")) == "-0.000123"


def test_the_api_keeps_its_fixed_places():
    assert money_str(Decimal("0.000024")) == "0.00002400"
    assert money_str(Decimal("0E-8")) == "0.00000000"


@given(st.decimals(min_value=Decimal("-99999999"), max_value=Decimal("99999999"), places=8))
def test_what_it_shows_is_the_exact_amount(amount):
    shown = money_display(amount)
    sign, _, digits = shown.partition("¥")
    assert sign in ("", "-")
    assert money_parse(sign + digits, allow_negative=True) == amount
    assert 2 <= len(digits.partition(".")[2]) <= 8
