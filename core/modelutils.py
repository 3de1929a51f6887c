from __future__ import annotations

from typing import Any, Final, TypedDict, TypeVar

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations

M = TypeVar("M", bound=models.Model)


class DecimalPlaces(TypedDict):
    """A DecimalField's size, as keyword arguments."""

    max_digits: int
    decimal_places: int


# Every money column: ¥ with 8 decimal places (a per-token charge can be ¥0.000024), up to 10^14.
MONEY: Final[DecimalPlaces] = {"max_digits": 22, "decimal_places": 8}

# The most a PositiveIntegerField column holds on every supported database (2^31 - 1).
POSITIVE_INTEGER_MAX: Final[int] = BaseDatabaseOperations.integer_field_ranges["PositiveIntegerField"][1]


def field_bounds(field: models.Field[Any, Any]) -> tuple[Any, Any]:
    """The lowest and highest value a numeric column holds (None: no bound): its type's range on every
    supported database, narrowed by its validators (the declared ones and the database's own range)."""
    low, high = BaseDatabaseOperations.integer_field_ranges.get(field.get_internal_type(), (None, None))
    for validator in field.validators:
        if isinstance(validator, MinValueValidator):
            low = validator.limit_value if low is None else max(low, validator.limit_value)
        elif isinstance(validator, MaxValueValidator):
            high = validator.limit_value if high is None else min(high, validator.limit_value)
    return low, high


def model_upsert(model: type[M], *, lookup: dict[str, Any], values: dict[str, Any]) -> tuple[M, str]:
    """Create the row matching `lookup`, or update only the fields whose value differs.

    Returns (instance, outcome) with outcome "created", "updated" or "unchanged", so that applying
    the same values twice writes nothing.
    """
    instance = model._default_manager.filter(**lookup).first()
    if instance is None:
        return model._default_manager.create(**lookup, **values), "created"
    changed = [name for name, value in values.items() if getattr(instance, name) != value]
    for name in changed:
        setattr(instance, name, values[name])
    if changed:
        auto_now = [f.name for f in model._meta.concrete_fields if getattr(f, "auto_now", False)]
        instance.save(update_fields=[*changed, *auto_now])
    return instance, "updated" if changed else "unchanged"


def queryset_delete_in_batches(queryset: models.QuerySet[Any], *, batch_size: int) -> int:
    """Delete the rows of `queryset` a batch of primary keys at a time, in key order, so that no single
    statement locks a large part of the table for long and no batch reads again the rows before it
    that stay; a row that no longer matches when its batch is deleted stays. Returns how many rows
    were deleted."""
    deleted = 0
    after: Any = None
    while True:
        rest = queryset if after is None else queryset.filter(pk__gt=after)
        ids = list(rest.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        count, _ = queryset.filter(pk__in=ids).delete()
        deleted += count
        after = ids[-1]
