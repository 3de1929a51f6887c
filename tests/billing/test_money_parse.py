"""Parsing an amount (billing.money.money_parse): exact, or a MoneyError saying why; never another
exception, whatever the text or number."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.money import MAX_AMOUNT, MoneyError, money_parse

NUMBERS = st.one_of(
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.from_regex(r"\A-?[0-9]{0,40}(\.[0-9]{0,40})?([eE][-+]?[0-9]{1,5})?\Z"),
    st.text(max_size=20),
)


@given(value=NUMBERS)
def test_any_text_or_number_is_an_exact_amount_or_a_money_error(value):
    try:
        amount = money_parse(value, allow_negative=True)
    except MoneyError:
        return
    assert amount == Decimal(str(value).strip())
    assert abs(amount) < MAX_AMOUNT


@pytest.mark.parametrize("value", ["9" * 30, "1e400", "-1e400", 10**30, "100000000000000"])
def test_an_amount_beyond_the_columns_is_too_large(value):
    with pytest.raises(MoneyError, match="too large"):
        money_parse(value, allow_negative=True)
