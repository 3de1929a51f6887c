"""Upstream adapters, one module per kind, and the registry: `adapter_for` an upstream, and which
operations each kind serves (`adapter_serves`, `operations_for_kind`).

A new kind is a module here with an `Adapter` subclass that names its `kind` and its `operations`,
added to `ADAPTERS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from upstreams.providers.anthropic import AnthropicAdapter
from upstreams.providers.base import Adapter
from upstreams.providers.demo import DemoAdapter
from upstreams.providers.gemini import GeminiAdapter
from upstreams.providers.openai import OpenAIAdapter
from upstreams.providers.openai_compatible import OpenAICompatibleAdapter

if TYPE_CHECKING:
    from upstreams.snapshots import UpstreamSnapshot

ADAPTERS: dict[str, type[Adapter]] = {
    AnthropicAdapter.kind: AnthropicAdapter,
    DemoAdapter.kind: DemoAdapter,
    GeminiAdapter.kind: GeminiAdapter,
    OpenAIAdapter.kind: OpenAIAdapter,
    OpenAICompatibleAdapter.kind: OpenAICompatibleAdapter,
}


def adapter_for(upstream: UpstreamSnapshot, *, deadline: float | None = None) -> Adapter:
    try:
        adapter_class = ADAPTERS[upstream.kind]
    except KeyError:
        raise LookupError(f"no adapter for upstream kind {upstream.kind!r}") from None
    return adapter_class(upstream, deadline=deadline)


def operations_for_kind(*, kind: str) -> frozenset[str]:
    """The operations an upstream of `kind` serves (none for an unknown kind)."""
    adapter_class = ADAPTERS.get(kind)
    return adapter_class.operations if adapter_class is not None else frozenset()


def adapter_serves(*, kind: str, operation: str) -> bool:
    return operation in operations_for_kind(kind=kind)
