"""Which upstreams serve a model, in the order they are tried.

A model of any endpoint family (an image model today) names its upstreams through a many-to-many
field called `upstreams`. Its enabled upstreams are read once per configuration generation and kept
per process (`GenerationCache`, core/config_cache.py): every write to an upstream, a model or a
model's upstream list bumps the generation after commit, so the next call on every process routes by
the new rows. The order is drawn anew for every call from the cached candidates.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from django.db.models import Model

from core.config_cache import GenerationCache
from upstreams.models import Upstream


@dataclass(frozen=True)
class _Tier:
    """Upstreams of one priority and their weights. Shared by every thread: never mutated."""

    upstreams: tuple[Upstream, ...]
    weights: tuple[int, ...]


# Keyed by (model label, model id): bounded by the configuration.
_candidates: GenerationCache[tuple[_Tier, ...]] = GenerationCache(name="model_upstreams")


def upstreams_for_model(*, model: Model) -> list[Upstream]:
    """Enabled upstreams by priority (lower first); within a priority, a weighted random order drawn
    for this call. The Upstream instances are shared and read-only."""
    key = (model._meta.label_lower, model.pk)
    tiers = _candidates.get_or_load(key, lambda: _tiers_load(model=model))
    ordered: list[Upstream] = []
    for tier in tiers:
        if len(tier.upstreams) == 1:
            ordered.append(tier.upstreams[0])
            continue
        pool = list(tier.upstreams)
        weights = list(tier.weights)
        while pool:
            # Weighted choice without replacement: weight w is picked first w/total of the time.
            index = random.choices(range(len(pool)), weights=weights)[0]
            ordered.append(pool.pop(index))
            weights.pop(index)
    return ordered


def _tiers_load(*, model: Model) -> tuple[_Tier, ...]:
    by_priority: dict[int, list[Upstream]] = {}
    for upstream in model.upstreams.filter(enabled=True):  # type: ignore[attr-defined]
        by_priority.setdefault(upstream.priority, []).append(upstream)
    return tuple(
        _Tier(
            upstreams=tuple(by_priority[priority]),
            weights=tuple(upstream.weight for upstream in by_priority[priority]),
        )
        for priority in sorted(by_priority)
    )
