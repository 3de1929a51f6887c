"""Each upstream kind declares the operations it serves; the registry answers for the endpoints, and
an adapter asked for an operation it does not serve refuses it without retrying or calling out."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from upstreams.providers import ADAPTERS, adapter_for, adapter_serves, operations_for_kind
from upstreams.providers.base import (
    CHAT_COMPLETIONS,
    GEMINI_COUNT_TOKENS,
    GEMINI_GENERATE,
    IMAGES_EDIT,
    IMAGES_GENERATE,
    IMAGES_STREAM,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    RESPONSES,
    TEXT_OPERATIONS,
    Adapter,
    ImageRequest,
    UpstreamError,
)
from upstreams.services import upstream_upsert

REQUEST = ImageRequest(operation="generate", upstream_model="m", prompt="a fox", size="64x64")


def upstream_of(kind: str):
    upstream, _ = upstream_upsert(
        name=f"{kind}-ops",
        kind=kind,
        base_url="" if kind == "demo" else "https://provider.test/v1",
        api_key_env="",
        timeout_seconds=30,
        priority=0,
        weight=1,
        enabled=True,
    )
    return upstream


def test_it_says_which_operations_each_kind_serves():
    assert operations_for_kind(kind="openai") == {
        IMAGES_GENERATE,
        IMAGES_EDIT,
        IMAGES_STREAM,
        CHAT_COMPLETIONS,
        RESPONSES,
    }
    assert operations_for_kind(kind="anthropic") == {MESSAGES, MESSAGES_COUNT_TOKENS}
    assert operations_for_kind(kind="demo") == {
        IMAGES_GENERATE,
        IMAGES_EDIT,
        IMAGES_STREAM,
        *TEXT_OPERATIONS,
    }
    assert operations_for_kind(kind="gemini") == {
        IMAGES_GENERATE,
        IMAGES_EDIT,
        GEMINI_GENERATE,
        GEMINI_COUNT_TOKENS,
    }
    assert operations_for_kind(kind="no-such-kind") == frozenset()
    assert adapter_serves(kind="gemini", operation=IMAGES_EDIT)
    assert not adapter_serves(kind="gemini", operation=IMAGES_STREAM)
    assert not adapter_serves(kind="openai", operation=MESSAGES)


def test_every_registered_kind_declares_what_it_serves():
    for kind, adapter_class in ADAPTERS.items():
        assert adapter_class.kind == kind
        assert adapter_class.operations, kind
        known = {
            IMAGES_GENERATE,
            IMAGES_EDIT,
            IMAGES_STREAM,
            GEMINI_GENERATE,
            GEMINI_COUNT_TOKENS,
            *TEXT_OPERATIONS,
        }
        assert adapter_class.operations <= known


@pytest.mark.django_db
@pytest.mark.parametrize("operation", [IMAGES_STREAM, "chat.completions", "messages.count_tokens"])
def test_an_operation_a_kind_does_not_serve_is_refused_and_not_retried(operation, mocked):
    with pytest.raises(UpstreamError) as info:
        adapter_for(upstream_of("gemini")).call(operation, REQUEST)
    assert info.value.retryable is False
    assert info.value.sent is False
    assert "gemini upstreams do not serve" in info.value.message
    assert len(mocked.calls) == 0  # refused before any HTTP


@pytest.mark.django_db
def test_calling_a_method_of_an_operation_not_declared_is_refused_too():
    with pytest.raises(UpstreamError) as info:
        adapter_for(upstream_of("gemini")).stream(REQUEST)
    assert info.value.retryable is False


@pytest.mark.django_db
def test_it_runs_a_served_operation_by_its_name():
    result = adapter_for(upstream_of("demo")).call(IMAGES_GENERATE, REQUEST)
    assert len(result.items) == 1 and result.items[0].b64_json
    events = list(adapter_for(upstream_of("demo")).call(IMAGES_STREAM, REQUEST))
    assert [event.final for event in events] == [True]


class EchoTextAdapter(Adapter):
    """A kind serving a text operation beside an image one, as the text families' adapters will."""

    kind = "echo"
    operations: ClassVar[frozenset[str]] = frozenset({IMAGES_GENERATE, "chat.completions"})

    def generate(self, request: ImageRequest) -> Any:
        return ("image", request.prompt)

    def serve(self, operation: str, request: Any) -> Any:
        self.operation_check(operation)
        return (operation, request)


@pytest.mark.django_db
def test_a_kind_adds_text_operations_through_the_same_entry():
    adapter = EchoTextAdapter(upstream_of("demo"))
    assert adapter.call("chat.completions", {"messages": []}) == ("chat.completions", {"messages": []})
    assert adapter.call(IMAGES_GENERATE, REQUEST) == ("image", "a fox")
    with pytest.raises(UpstreamError):
        adapter.call("responses", {})
    with pytest.raises(UpstreamError):
        adapter.call(IMAGES_EDIT, REQUEST)
