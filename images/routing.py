"""Which upstreams serve a model, in the order they are tried."""

from __future__ import annotations

import random

from images.models import ImageModel, Upstream


def upstreams_for_model(*, image_model: ImageModel) -> list[Upstream]:
    """Enabled upstreams by priority (lower first); within a priority, a weighted random order."""
    by_priority: dict[int, list[Upstream]] = {}
    for upstream in image_model.upstreams.filter(enabled=True):
        by_priority.setdefault(upstream.priority, []).append(upstream)
    ordered: list[Upstream] = []
    for priority in sorted(by_priority):
        pool = by_priority[priority]
        while pool:
            # Weighted choice without replacement: weight w is picked first w/total of the time.
            chosen = random.choices(pool, weights=[u.weight for u in pool])[0]
            ordered.append(chosen)
            pool.remove(chosen)
    return ordered
