"""Translators between the text families' wire formats, one module per pair (caller's format, then the
upstream's): `messages_via_chat` serves an Anthropic Messages caller from an OpenAI Chat Completions
upstream.

A translator is a small object made per call with four steps: the request body (what the caller
sent, made into what the upstream reads), the answer (a whole body, or a stream one upstream event
at a time, giving back the caller's bytes), the usage it saw (`tokens`), and an error body. It keeps
only the state a stream needs (and a Responses caller's answer) and does no I/O, logging or
locking; it imports nothing of Django or of the gateway's apps, so it runs inside the stream relay's
loop. The pipeline calls it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ResponsesAnswer", "TranslatedCall", "TranslatedTokens", "TranslationRefused", "Translator"]


@dataclass(frozen=True, slots=True)
class TranslatedCall:
    """What a translator knows of its call: the model's id as the caller named it (answers carry it),
    the upstream's name for it and the upstream's kind, the output limit to send when the caller gave
    none (the model's), and the answer's Unix time (translators read no clock)."""

    model: str
    upstream_model: str
    upstream_kind: str
    max_tokens: int
    created: int


class TranslationRefused(ValueError):
    """The caller asked for something the upstream's format cannot express without changing the
    answer's form (chat `n` > 1 on an Anthropic upstream, an audio part): a 400 naming `param`."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class TranslatedTokens:
    """The tokens an upstream reported, split by price as billing reads them: `input` excludes the
    cached (`cached`) and cache-write (`cache_write`) tokens; `cache_write_1h` is the part of the
    writes made to a one-hour cache; `output` includes the reasoning tokens, which `reasoning` counts
    where the upstream reports them apart (for the caller's usage; billing prices them as output)."""

    input: int = 0
    cached: int = 0
    cache_write: int = 0
    output: int = 0
    cache_write_1h: int = 0
    reasoning: int = 0


@dataclass(frozen=True, slots=True)
class ResponsesAnswer:
    """A Responses caller's answer so far, as it was given it: its id, output items and, once the
    answer is whole, its response object (what the gateway keeps for a later `previous_response_id`,
    `item_reference` or retrieval)."""

    response_id: str
    items: Sequence[Mapping[str, Any]]
    response: Mapping[str, Any] | None = None


class Translator(Protocol):
    """What every translator offers the pipeline: made per call from its TranslatedCall."""

    @property
    def tokens(self) -> TranslatedTokens | None:
        """The usage the upstream reported, once seen (every bucket, as billing reads it)."""

    @property
    def responses_answer(self) -> ResponsesAnswer | None:
        """A Responses caller's answer so far; None for a caller of another family."""

    def request_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The upstream's body for the caller's; raises TranslationRefused."""

    def response_body(self, body: Any) -> dict[str, Any]:
        """The caller's answer for the upstream's whole answer (any JSON)."""

    def stream_event(self, data: str) -> bytes:
        """The caller's bytes for one upstream event's data, as it arrives."""

    def stream_end(self) -> bytes:
        """What ends the caller's stream once the upstream's has ended (nothing the second time)."""

    def error_body(self, status: int, body: bytes) -> bytes:
        """The caller's error body for an upstream's error answer."""
