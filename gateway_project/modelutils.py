from __future__ import annotations

from typing import Any, TypeVar

from django.db import models

M = TypeVar("M", bound=models.Model)


def model_upsert(model: type[M], *, lookup: dict[str, Any], values: dict[str, Any]) -> tuple[M, str]:
    """Create the row matching `lookup`, or update only the fields whose value differs.

    Returns (instance, outcome) with outcome "created", "updated" or "unchanged", so that applying
    the same values twice writes nothing.
    """
    instance = model.objects.filter(**lookup).first()
    if instance is None:
        return model.objects.create(**lookup, **values), "created"
    changed = [name for name, value in values.items() if getattr(instance, name) != value]
    for name in changed:
        setattr(instance, name, values[name])
    if changed:
        auto_now = [f.name for f in model._meta.concrete_fields if getattr(f, "auto_now", False)]
        instance.save(update_fields=[*changed, *auto_now])
    return instance, "updated" if changed else "unchanged"
