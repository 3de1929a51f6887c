"""Which upstreams serve a model, in the order they are tried.

A model's enabled upstreams are read once per configuration generation and kept per process
(`GenerationCache`, gateway_project/generations.py): every write to an upstream, an image model or a
model's upstream list bumps the generation after commit (images/apps.py), so the next call on every
process routes by the new rows. The order is drawn anew for every call from the cached candidates.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gateway_project.generations import GenerationCache
from images.models import ImageModel, Upstream


@dataclass(frozen=True)
class _Tier:
    """Upstreams of one priority and their weights. Shared by every thread: never mutated."""

    upstreams: tuple[Upstream, ...]
    weights: tuple[int, ...]


# Keyed by image model id: bounded by the configuration.
_candidates: GenerationCache[tuple[_Tier, ...]] = GenerationCache(name="model_upstreams")


def upstreams_for_model(*, image_model: ImageModel) -> list[Upstream]:
    """Enabled upstreams by priority (lower first); within a priority, a weighted random order drawn
    for this call. The Upstream instances are shared and read-only."""
    tiers = _candidates.get_or_load(image_model.pk, lambda: _tiers_load(image_model_id=image_model.pk))
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


def _tiers_load(*, image_model_id: int) -> tuple[_Tier, ...]:
    by_priority: dict[int, list[Upstream]] = {}
    for upstream in Upstream.objects.filter(image_models=image_model_id, enabled=True):
        by_priority.setdefault(upstream.priority, []).append(upstream)
    return tuple(
        _Tier(
            upstreams=tuple(by_priority[priority]),
            weights=tuple(upstream.weight for upstream in by_priority[priority]),
        )
        for priority in sorted(by_priority)
    )
