"""`/v1/messages/count_tokens` for a model whose upstream cannot count (a Chat Completions upstream):
the gateway counts the body itself.

The body is put in the form its upstream would read (the messages translator, so what cannot be sent
is refused as the call would be), then counted with `o200k_base` (tiktoken, chat/tokenizers.py): every
string of the messages and of the tools' definitions, plus 3 tokens a message and 3 for the answer's
start, as OpenAI's chat format adds them, and `GATEWAY_TEXT_IMAGE_TOKENS` an image. For OpenAI's o200k
models that is the count the provider makes, within its few tokens of formatting; for other models
(DeepSeek's, Qwen's, Llama's tokenizers) it is an estimate in o200k tokens. Without the encoding (it
ships with the gateway, so only a damaged install), each string counts a token per 4 UTF-8 bytes,
rounded up.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings

from chat.tokenizers import o200k_encoder
from translators import TranslatedCall
from translators.messages_via_chat import MessagesViaChat

PER_MESSAGE_TOKENS = 3
ANSWER_START_TOKENS = 3


def messages_input_tokens(*, body: dict[str, Any], upstream_model: str) -> int:
    """The input tokens of a Messages body; raises TranslationRefused for what the model cannot read."""
    call = TranslatedCall(
        model="", upstream_model=upstream_model, upstream_kind="openai-compatible", max_tokens=1, created=0
    )
    sent = MessagesViaChat(call).request_body(body)
    count = _counter()
    total = ANSWER_START_TOKENS
    for message in sent["messages"]:
        total += PER_MESSAGE_TOKENS + _strings_counted(message, count=count)
    if sent.get("tools"):
        total += count(json.dumps(sent["tools"], ensure_ascii=False, separators=(",", ":")))
    return total


def _counter() -> Callable[[str], int]:
    encode = o200k_encoder()
    if encode is None:
        return lambda text: -(-len(text.encode("utf-8")) // 4)
    return lambda text: len(encode(text))


def _strings_counted(value: Any, *, count: Callable[[str], int]) -> int:
    """Every string in `value`, counted; an image part counts GATEWAY_TEXT_IMAGE_TOKENS."""
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            total += count(item)
        elif isinstance(item, dict):
            if item.get("type") == "image_url":
                total += settings.GATEWAY_TEXT_IMAGE_TOKENS
                continue
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return total
