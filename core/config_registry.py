"""The registry of what invalidates the configuration caches: each app names, in its
`AppConfig.ready()`, the models it owns whose writes change a cached answer (`invalidating_register`),
and core connects one set of receivers that bump the configuration generation after commit
(core/config_cache.py). Core imports no app: the list is what the apps registered.

`QuerySet.update()` sends no signal: a service that updates one of these models that way bumps itself
(`api_key_revoke`); `QuerySet.delete()` sends post_delete for every row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db.models.signals import m2m_changed, post_delete, post_save

from core.config_cache import config_generation_bump_on_commit


@dataclass(frozen=True)
class Invalidating:
    """Writes to the model `label` ("app_label.ModelName"; an auto-created many-to-many through model
    for a relation's additions and removals) change what the caches hold, so each bumps the generation
    once it commits.

    - `fields_not_cached`: a save touching only these columns changes no cached answer;
    - `new_rows`: whether a new row does (yes where a cache lists every row: groups, image models,
      upstreams; no for credentials, users and accounts, which no cached answer can refer to before
      they exist);
    - `deletion_invalidates`: a test of the deleted row (None: every deletion invalidates).
    """

    label: str
    fields_not_cached: frozenset[str] = frozenset()
    new_rows: bool = False
    deletion_invalidates: Callable[[Any], bool] | None = None


_invalidating: dict[type[Any], Invalidating] = {}


def invalidating_register(*entries: Invalidating) -> None:
    """Have writes to each entry's model bump the configuration generation after commit. Called from
    the owning app's `AppConfig.ready()` (its models are loaded by then); registering a model again
    replaces its entry."""
    for entry in entries:
        model = apps.get_model(entry.label)
        _invalidating[model] = entry
        uid = f"config_cache_{entry.label}"
        if model._meta.auto_created:
            m2m_changed.connect(_relation_changed, sender=model, dispatch_uid=f"{uid}_m2m")
        else:
            post_save.connect(_saved, sender=model, dispatch_uid=f"{uid}_saved")
            post_delete.connect(_deleted, sender=model, dispatch_uid=f"{uid}_deleted")


def invalidating_models() -> tuple[Invalidating, ...]:
    """Every registered entry: the models whose writes invalidate the configuration caches."""
    return tuple(_invalidating.values())


def _saved(*, sender: type[Any], created: bool, update_fields: frozenset[str] | None, **_: Any) -> None:
    entry = _invalidating[sender]
    if created and not entry.new_rows:
        return
    if update_fields is not None and update_fields <= entry.fields_not_cached:
        return
    config_generation_bump_on_commit()


def _deleted(*, sender: type[Any], instance: Any, **_: Any) -> None:
    test = _invalidating[sender].deletion_invalidates
    if test is None or test(instance):
        config_generation_bump_on_commit()


def _relation_changed(*, action: str, **_: Any) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        config_generation_bump_on_commit()
