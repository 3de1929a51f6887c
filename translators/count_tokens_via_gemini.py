"""`/v1/messages/count_tokens` for a model on Gemini: its own `countTokens`, asked with the
generateContent request the messages call would make (Messages → Chat Completions → Gemini, as
translators/chained.py goes), so the count is Gemini's for what the call would send; its
`totalTokens` comes back as Anthropic's `input_tokens`. Free, and never streamed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from translators import ResponsesAnswer, TranslatedCall, TranslatedTokens
from translators.chat_via_gemini import ChatViaGemini
from translators.messages_via_chat import MessagesViaChat
from translators.values import count, error_message, obj

# Anthropic's error types by status, as /v1/messages/count_tokens answers them.
_ERROR_TYPE = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}


class CountTokensViaGemini:
    """One token count of a Messages body on a Gemini upstream."""

    tokens: TranslatedTokens | None = None  # counting is free: no usage to bill
    responses_answer: ResponsesAnswer | None = None  # a caller of another family

    def __init__(self, call: TranslatedCall) -> None:
        self.call = call

    def request_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        chat = MessagesViaChat(self.call).request_body(body)
        request = ChatViaGemini(self.call).request_body(chat)
        return {"generateContentRequest": {"model": f"models/{self.call.upstream_model}", **request}}

    def response_body(self, body: Any) -> dict[str, Any]:
        return {"input_tokens": count(obj(body).get("totalTokens"))}

    def stream_event(self, data: str) -> bytes:
        return b""  # counting is never streamed

    def stream_end(self) -> bytes:
        return b""

    def error_body(self, status: int, body: bytes) -> bytes:
        error_type = _ERROR_TYPE.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return json.dumps(
            {"type": "error", "error": {"type": error_type, "message": error_message(status, body)}}
        ).encode()
