"""Translators between the text families' wire formats, one module per pair (caller's format, then the
upstream's): `messages_via_chat` serves an Anthropic Messages caller from an OpenAI Chat Completions
upstream.

A translator is a small object made per call with four steps: the request body (what the caller
sent, made into what the upstream reads), the answer (a whole body, or a stream one upstream event at
a time, giving back the caller's bytes), the usage it saw (`tokens`), and an error body. It keeps only
the state a stream needs and does no I/O, logging or locking; it imports nothing of Django or of the
gateway's apps, so it runs inside the stream relay's loop. The pipeline calls it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TranslatedTokens", "TranslationRefused"]


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
    cached (`cached`) and cache-write (`cache_write`) tokens; `output` includes reasoning tokens."""

    input: int = 0
    cached: int = 0
    cache_write: int = 0
    output: int = 0
