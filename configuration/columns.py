"""Pydantic types for the configuration file's keys, derived from the columns they are stored in.

`column(Upstream, "circuit_threshold")` is the type of a TOML key written to that column: its Python
type, its choices, and its limits (the integer range of the column type, max_length, max_digits and
decimal_places, MinValueValidator), so a value the database would refuse is a loader error naming the
key instead of a database traceback. Limits are read from the model field, never repeated here.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator, URLValidator
from django.db import models
from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, StringConstraints
from pydantic_core import PydanticCustomError

from billing.money import MoneyError, money_parse
from core.modelutils import field_bounds


def problem(message: str, **context: Any) -> PydanticCustomError:
    """A validation error whose message the loader shows after the key's name, as written."""
    return PydanticCustomError("config", message, context or None)


def _text(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise problem("must be a non-empty string")
    return value


def _matching(pattern: re.Pattern[str], hint: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise problem("{value} is not valid ({hint})", value=repr(value), hint=hint)
        return value

    return AfterValidator(check)


def _http_url(value: str) -> str:
    try:
        URLValidator(schemes=["http", "https"])(value)
    except ValidationError:
        raise problem("{value} is not valid (an http(s) URL)", value=repr(value)) from None
    return value


def _email(value: str) -> str:
    try:
        EmailValidator()(value)
    except ValidationError:
        raise problem("{value} is not an email address", value=repr(value)) from None
    return value


def _money(field: models.DecimalField) -> BeforeValidator:
    whole_digits = field.max_digits - field.decimal_places

    def read(value: Any) -> Decimal:
        if isinstance(value, float):
            raise problem(
                'write amounts as strings ("{value}"): a TOML float cannot hold ¥ amounts exactly',
                value=value,
            )
        try:
            amount = money_parse(value)
        except MoneyError as exc:
            raise problem(str(exc)) from None
        if amount.as_tuple().exponent < -field.decimal_places:
            raise problem(
                "{value} has more than {places} decimal places",
                value=repr(value),
                places=field.decimal_places,
            )
        if abs(amount) >= Decimal(10) ** whole_digits:
            raise problem(
                "{value} is too large: at most {digits} digits before the decimal point",
                value=repr(value),
                digits=whole_digits,
            )
        return amount

    return BeforeValidator(read)


def _datetime(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise problem(
                "{value} is not an RFC 3339 date-time such as 2027-12-31T00:00:00Z", value=repr(value)
            ) from None
    if not isinstance(value, datetime):
        raise problem("must be a date-time such as 2027-12-31T00:00:00Z, got {value}", value=repr(value))
    if value.tzinfo is None:
        raise problem("must carry a time zone offset, e.g. 2027-12-31T00:00:00Z")
    return value


def _bounds(field: models.Field) -> dict[str, Any]:
    """The ge/le limits of a numeric column."""
    low, high = field_bounds(field)
    return {key: value for key, value in (("ge", low), ("le", high)) if value is not None}


def column(
    model: type[models.Model],
    name: str,
    *,
    pattern: re.Pattern[str] | None = None,
    hint: str = "",
    **limits: Any,
) -> Any:
    """The pydantic type of a key stored in `model.name`; `limits` (ge=...) narrow the column's own."""
    field = model._meta.get_field(name)
    if field.choices:
        return Literal[tuple(value for value, _ in field.flatchoices)]
    if isinstance(field, models.BooleanField):
        return StrictBool
    if isinstance(field, models.IntegerField):
        return Annotated[int, Field(**(_bounds(field) | limits))]
    if isinstance(field, models.FloatField):
        return Annotated[float, Field(allow_inf_nan=False, **(_bounds(field) | limits))]
    if isinstance(field, models.DecimalField):
        return Annotated[Decimal, _money(field)]
    if isinstance(field, models.DateTimeField):
        return Annotated[datetime, BeforeValidator(_datetime)]
    if isinstance(field, models.CharField):
        checks: list[Any] = [BeforeValidator(_text), StringConstraints(max_length=field.max_length)]
        if isinstance(field, models.URLField):
            checks.append(AfterValidator(_http_url))
        if pattern is not None:
            checks.append(_matching(pattern, hint))
        if isinstance(field, models.EmailField):
            checks.append(AfterValidator(_email))
        return Annotated[(str, *checks)]
    raise TypeError(f"no configuration type for {model.__name__}.{name} ({type(field).__name__})")


NonEmptyStrings = list[Annotated[str, BeforeValidator(_text)]]
