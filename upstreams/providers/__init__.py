"""Upstream adapters, one module per kind, looked up by `adapter_for`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from upstreams.providers.base import Adapter
from upstreams.providers.demo import DemoAdapter
from upstreams.providers.gemini import GeminiAdapter
from upstreams.providers.openai import OpenAIAdapter

if TYPE_CHECKING:
    from upstreams.models import Upstream

ADAPTERS: dict[str, type[Adapter]] = {
    DemoAdapter.kind: DemoAdapter,
    GeminiAdapter.kind: GeminiAdapter,
    OpenAIAdapter.kind: OpenAIAdapter,
}


def adapter_for(upstream: Upstream, *, deadline: float | None = None) -> Adapter:
    try:
        adapter_class = ADAPTERS[upstream.kind]
    except KeyError:
        raise LookupError(f"no adapter for upstream kind {upstream.kind!r}") from None
    return adapter_class(upstream, deadline=deadline)
