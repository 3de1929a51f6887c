"""Which upstreams serve a model, in the order they are tried.

A model of any endpoint family (`images.ImageModel`, `chat.TextModel`) names its upstreams through
a many-to-many field called `upstreams`; a call names the model by its label and primary key. Its
enabled upstreams are read once per configuration generation and kept per process as snapshots
(`GenerationCache`, core/config_cache.py): every write to an upstream, a model or a model's upstream
list bumps the generation after commit, so the next call on every process routes by the new rows.
The order is drawn anew for every call from the cached candidates; a call that names a conversation
goes first, among the upstreams of a priority, to the one that answered it before (upstreams/affinity.py).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from django.apps import apps

from core.config_cache import GenerationCache
from upstreams.affinity import Affinity, affinity_upstream_get
from upstreams.models import Upstream
from upstreams.snapshots import UpstreamSnapshot


@dataclass(frozen=True)
class _Tier:
    """Upstreams of one priority and their weights."""

    upstreams: tuple[UpstreamSnapshot, ...]
    weights: tuple[int, ...]


@dataclass(frozen=True)
class _Candidates:
    """A model's enabled upstreams by priority, and whether stickiness has a choice to make: some
    priority has two upstreams or more, counting disabled ones (a conversation on an upstream
    disabled since must move to the one that answers)."""

    tiers: tuple[_Tier, ...]
    choosing: bool


@dataclass(frozen=True)
class RoutedUpstreams:
    """A call's upstreams in the order it tries them, and its conversation for the upstream that
    answers to keep (None when it names none, or when stickiness has no choice to make)."""

    upstreams: list[UpstreamSnapshot]
    affinity: Affinity | None


# Keyed by (model label, model id): bounded by the configuration.
_candidates: GenerationCache[_Candidates] = GenerationCache(name="model_upstreams")


def upstreams_for_model(*, model_label: str, model_pk: int) -> list[UpstreamSnapshot]:
    """Enabled upstreams of the model `model_label` ("app_label.ModelName") with primary key
    `model_pk`, by priority (lower first); within a priority, a weighted random order drawn for this
    call."""
    return upstreams_route(model_label=model_label, model_pk=model_pk, affinity=None).upstreams


def upstreams_route(*, model_label: str, model_pk: int, affinity: Affinity | None) -> RoutedUpstreams:
    """As `upstreams_for_model`, a call naming a conversation (`affinity`) trying first, among the
    upstreams of its priority, the one that last answered that conversation."""
    key = (model_label.lower(), model_pk)
    candidates = _candidates.get_or_load(
        key, lambda: _candidates_load(model_label=model_label, model_pk=model_pk)
    )
    if not candidates.choosing:
        affinity = None
    # One cache read, only where stickiness can choose.
    sticky = affinity_upstream_get(affinity=affinity) if affinity is not None else None
    ordered: list[UpstreamSnapshot] = []
    for tier in candidates.tiers:
        if len(tier.upstreams) == 1:
            ordered.append(tier.upstreams[0])
            continue
        pool = list(tier.upstreams)
        weights = list(tier.weights)
        for index, upstream in enumerate(pool):
            if upstream.pk == sticky:
                ordered.append(pool.pop(index))
                weights.pop(index)
                break
        while pool:
            # Weighted choice without replacement: weight w is picked first w/total of the time.
            index = random.choices(range(len(pool)), weights=weights)[0]
            ordered.append(pool.pop(index))
            weights.pop(index)
    return RoutedUpstreams(upstreams=ordered, affinity=affinity)


def _candidates_load(*, model_label: str, model_pk: int) -> _Candidates:
    # The reverse name of the model's `upstreams` field, e.g. `image_models` for images.ImageModel.
    relation = apps.get_model(model_label)._meta.get_field("upstreams").related_query_name()
    by_priority: dict[int, list[UpstreamSnapshot]] = {}
    configured: Counter[int] = Counter()
    for upstream in Upstream.objects.filter(**{relation: model_pk}):
        configured[upstream.priority] += 1
        if upstream.enabled:
            by_priority.setdefault(upstream.priority, []).append(UpstreamSnapshot.from_model(upstream))
    tiers = tuple(
        _Tier(
            upstreams=tuple(by_priority[priority]),
            weights=tuple(upstream.weight for upstream in by_priority[priority]),
        )
        for priority in sorted(by_priority)
    )
    return _Candidates(tiers=tiers, choosing=any(count > 1 for count in configured.values()))
