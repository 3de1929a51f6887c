"""Reads of the upstreams for other apps."""

from __future__ import annotations

from upstreams.models import Upstream


def upstream_names_enabled() -> dict[int, str]:
    """Upstream id -> name of every enabled upstream (one query)."""
    return dict(Upstream.objects.filter(enabled=True).order_by("pk").values_list("pk", "name"))
