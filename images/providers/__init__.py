"""Upstream adapters, one module per kind, looked up by `adapter_for`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from images.providers.base import Adapter
from images.providers.demo import DemoAdapter

if TYPE_CHECKING:
    from images.models import Upstream

ADAPTERS: dict[str, type[Adapter]] = {DemoAdapter.kind: DemoAdapter}


def adapter_for(upstream: Upstream) -> Adapter:
    try:
        return ADAPTERS[upstream.kind](upstream)
    except KeyError:
        raise LookupError(f"no adapter for upstream kind {upstream.kind!r}") from None
