"""Which translator serves a caller's family on an upstream that speaks another (translators/).

A model is served on a family's endpoint natively when its upstreams' kind serves that family, and
through a translator when one exists from the caller's family to a family the kind serves. Today:
`/v1/messages` on a Chat Completions upstream (`openai`, `openai-compatible`), `/v1/responses` on one
that does not speak Responses (`openai-compatible`) or on a Messages upstream (through Chat
Completions), and `/v1/chat/completions` on a Messages upstream (`anthropic`).
`/v1/messages/count_tokens` for a model whose upstream cannot count is counted by the gateway itself
(chat/token_count.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from billing.usage import TokenCounts
from chat.families import (
    CHAT,
    COUNT_TOKENS,
    GEMINI_COUNT_FAMILY,
    GEMINI_FAMILY,
    MESSAGES_FAMILY,
    RESPONSES_FAMILY,
    Family,
)
from translators import TranslatedCall, TranslatedTokens, Translator
from translators.chained import Chained
from translators.chat_via_gemini import ChatViaGemini
from translators.chat_via_messages import ChatViaMessages
from translators.count_tokens_via_gemini import CountTokensViaGemini
from translators.messages_via_chat import MessagesViaChat
from translators.responses_via_chat import ResponsesViaChat
from upstreams.providers import adapter_serves
from upstreams.providers.base import TextRequest

# (the caller's family, the family spoken upstream) -> the translator's class.
TRANSLATORS: dict[tuple[Family, Family], Callable[[TranslatedCall], Translator]] = {
    (MESSAGES_FAMILY, CHAT): MessagesViaChat,
    (CHAT, MESSAGES_FAMILY): ChatViaMessages,
    (RESPONSES_FAMILY, CHAT): ResponsesViaChat,
    (CHAT, GEMINI_FAMILY): ChatViaGemini,
    (COUNT_TOKENS, GEMINI_COUNT_FAMILY): CountTokensViaGemini,
    # Through Chat Completions as the hub (translators/chained.py).
    (RESPONSES_FAMILY, MESSAGES_FAMILY): functools.partial(Chained, ResponsesViaChat, ChatViaMessages),
    (MESSAGES_FAMILY, GEMINI_FAMILY): functools.partial(Chained, MessagesViaChat, ChatViaGemini),
    (RESPONSES_FAMILY, GEMINI_FAMILY): functools.partial(Chained, ResponsesViaChat, ChatViaGemini),
}


@dataclass(frozen=True)
class Translation:
    """How a call reaches its upstream: the family spoken there, and the translator between the
    caller's family and it (None when they are the same); or, for token counting on an upstream
    that cannot count, no upstream call at all (`counted_locally`)."""

    upstream_family: Family
    translator: Callable[[TranslatedCall], Translator] | None
    counted_locally: bool = False


@dataclass(frozen=True)
class Route:
    """How this call reaches the upstreams of one kind: the family spoken there, the translator (None
    when it is the caller's), the request sent and its body as the input ceiling reads it."""

    upstream_family: Family
    translator: Translator | None
    request: TextRequest
    sent: dict[str, Any]


def translation_for(*, family: Family, kind: str) -> Translation | None:
    """How an upstream of `kind` serves the caller's `family`: natively, through a translator, or not
    at all (None)."""
    if adapter_serves(kind=kind, operation=family.operation):
        return Translation(upstream_family=family, translator=None)
    for (caller, upstream_family), translator in TRANSLATORS.items():
        if caller is family and adapter_serves(kind=kind, operation=upstream_family.operation):
            return Translation(upstream_family=upstream_family, translator=translator)
    if family is COUNT_TOKENS and translation_for(family=MESSAGES_FAMILY, kind=kind) is not None:
        return Translation(upstream_family=family, translator=None, counted_locally=True)
    return None


def translator_make(*, translation: Translation, call: TranslatedCall) -> Translator | None:
    """The translator object for one call (None for a native call)."""
    if translation.translator is None:
        return None
    return translation.translator(call)


def translated_tokens_billed(seen: TranslatedTokens) -> TokenCounts:
    """The usage a translator saw, as billing prices it: every bucket the upstream reported (the
    caller's family may have no field for some; reasoning is priced as the output it is part of)."""
    return TokenCounts(
        input=seen.input,
        cached=seen.cached,
        cache_write=seen.cache_write,
        output=seen.output,
        cache_write_1h=seen.cache_write_1h,
    )
