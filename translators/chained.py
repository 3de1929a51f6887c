"""Two translators in a row, through Chat Completions as the hub: the caller's family to Chat
Completions (`outer`), Chat Completions to the upstream's (`inner`). `/v1/responses` on a Messages
upstream is Responses → Chat → Messages: what Codex CLI needs to call Claude.

What the hub cannot carry is lost on the way, each by its translators' own rules: thinking
signatures (dropped by both), and the cache-write tokens in the usage the caller sees (the charge is
made on the usage the upstream reported, every bucket kept, which `tokens` gives).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from translators import ResponsesAnswer, TranslatedCall, TranslatedTokens, Translator


def _chat_events(raw: bytes) -> Iterator[str]:
    """The data of each Chat Completions event in `raw` (`data: ...` blocks)."""
    for block in raw.decode("utf-8").split("\n\n"):
        if block.startswith("data: "):
            yield block[len("data: ") :]


class Chained:
    """`outer` (caller's family → Chat Completions) after `inner` (Chat Completions → upstream's)."""

    def __init__(
        self,
        outer: Callable[[TranslatedCall], Translator],
        inner: Callable[[TranslatedCall], Translator],
        call: TranslatedCall,
    ) -> None:
        self.outer = outer(call)
        self.inner = inner(call)

    @property
    def tokens(self) -> TranslatedTokens | None:
        return self.inner.tokens

    @property
    def responses_answer(self) -> ResponsesAnswer | None:
        return self.outer.responses_answer

    def request_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.inner.request_body(self.outer.request_body(body))

    def response_body(self, body: Any) -> dict[str, Any]:
        return self.outer.response_body(self.inner.response_body(body))

    def stream_event(self, data: str) -> bytes:
        return self._onward(self.inner.stream_event(data))

    def stream_end(self) -> bytes:
        return self._onward(self.inner.stream_end()) + self.outer.stream_end()

    def error_body(self, status: int, body: bytes) -> bytes:
        return self.outer.error_body(status, self.inner.error_body(status, body))

    def _onward(self, chat: bytes) -> bytes:
        return b"".join(self.outer.stream_event(data) for data in _chat_events(chat))
