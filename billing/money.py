"""Exact money: Decimal with a fixed number of places, parsed strictly, formatted as strings.

Two formats: `money_str` for the API (the fixed places, "0.00002400": a contract clients parse) and
`money_display` for people (¥0.000024), which every page, the console's and the admin's, uses.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal, InvalidOperation

from django.conf import settings
from django.db.models import DecimalField
from django.db.models.expressions import Combinable
from django.db.models.functions import Round

from core.modelutils import MONEY

MAX_AMOUNT = Decimal("100000000000000")  # fits max_digits=22, decimal_places=8 (core.modelutils.MONEY)


class MoneyError(ValueError):
    pass


def money_parse(value: object, *, allow_negative: bool = False, allow_zero: bool = True) -> Decimal:
    """Parse a str/int/Decimal amount exactly. Floats are refused: they cannot say 0.15 exactly."""
    if isinstance(value, bool | float):
        raise MoneyError(f'amount {value!r} must be a string like "0.15" or a whole number, not a float')
    if not isinstance(value, str | int | Decimal):
        raise MoneyError(f"amount {value!r} is not a number")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise MoneyError(f"amount {value!r} is not a number") from None
    if not amount.is_finite():
        raise MoneyError(f"amount {value!r} is not a finite number")
    if abs(amount) >= MAX_AMOUNT:  # before quantizing: a larger one may not fit Decimal's precision
        raise MoneyError(f"amount {value!r} is too large")
    quantized = amount.quantize(settings.MONEY_QUANTUM, rounding=ROUND_HALF_EVEN)
    if quantized != amount:
        raise MoneyError(f"amount {value!r} has more than {settings.MONEY_DECIMAL_PLACES} decimal places")
    if not allow_negative and quantized < 0:
        raise MoneyError(f"amount {value!r} must not be negative")
    if not allow_zero and quantized == 0:
        raise MoneyError(f"amount {value!r} must not be zero")
    return quantized


def money_round_up(amount: Decimal) -> Decimal:
    """A computed charge (e.g. tokens x a price per million) to the money places, rounded up: a
    charge is never rounded to zero, and never below its exact cost."""
    return amount.quantize(settings.MONEY_QUANTUM, rounding=ROUND_CEILING)


def money_str(amount: Decimal) -> str:
    """Format for the API: a plain decimal string with the fixed places, e.g. "10.15000000"."""
    return f"{amount.quantize(settings.MONEY_QUANTUM):f}"  # never exponent notation ("0E-8")


def money_trimmed(amount: Decimal) -> str:
    """An amount with at least two and at most the money places, trailing zeros trimmed: "33.08",
    "0.000024", "-5.00". What an input offers for editing; `money_display` adds the currency."""
    exact = amount.quantize(settings.MONEY_QUANTUM)
    whole, _, fraction = f"{abs(exact):f}".partition(".")
    sign = "-" if exact < 0 else ""  # never "-0.00" for a negative zero
    return f"{sign}{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def money_display(amount: Decimal) -> str:
    """An amount for people: ¥33.08, ¥0.000024 (a per-token charge is never rounded to ¥0.00),
    ¥0.00, -¥5.00. The API keeps `money_str`'s fixed places."""
    trimmed = money_trimmed(amount)
    return f"-¥{trimmed[1:]}" if trimmed.startswith("-") else f"¥{trimmed}"


def money_sql(expression: Combinable) -> Round:
    """Arithmetic on a money column inside an UPDATE, rounded to the money places.

    Exact NUMERIC arithmetic on PostgreSQL (the round is a no-op there); SQLite computes decimal
    columns in binary floating point, where 0.1 + 0.2 - 0.3 is not 0 and a CHECK (held >= 0) could
    refuse a correct release, so the result is rounded back to the money places."""
    return Round(expression, settings.MONEY_DECIMAL_PLACES, output_field=DecimalField(**MONEY))
