"""Chat Completions, the hub format, as the translators read and write it: its usage object both ways,
the tool messages of a turn whose tools returned images or documents (`ToolOutput`), and the chunks
of a stream written for a Chat Completions caller (`ChatChunks`). Each translator whose one side is
Chat Completions uses these, so the usage, the tool messages and the stream grammar come out the
same from every pair."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from translators import TranslatedTokens
from translators.values import count, json_bytes, obj


def chat_tokens(usage: Any) -> TranslatedTokens | None:
    """A Chat Completions `usage`: prompt tokens (the cached ones among them), completion tokens (the
    reasoning ones among them, `completion_tokens_details.reasoning_tokens`). None when absent."""
    if not isinstance(usage, dict):
        return None
    prompt = count(usage.get("prompt_tokens"))
    cached = min(count(obj(usage.get("prompt_tokens_details")).get("cached_tokens")), prompt)
    output = count(usage.get("completion_tokens"))
    reasoning = min(count(obj(usage.get("completion_tokens_details")).get("reasoning_tokens")), output)
    return TranslatedTokens(input=prompt - cached, cached=cached, output=output, reasoning=reasoning)


def chat_usage(tokens: TranslatedTokens | None) -> dict[str, Any]:
    """The Chat Completions `usage` for the tokens an upstream reported: its prompt counts every input
    token (cache reads and writes included), its completion the reasoning tokens too, which
    `completion_tokens_details` counts when the upstream reported them apart."""
    tokens = tokens or TranslatedTokens()
    prompt = tokens.input + tokens.cached + tokens.cache_write
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": tokens.output,
        "total_tokens": prompt + tokens.output,
        "prompt_tokens_details": {"cached_tokens": tokens.cached},
    }
    if tokens.reasoning:
        # Only when reported apart (Gemini's thoughts): Anthropic counts thinking inside its output
        # and says nothing of how much, which 0 would misstate.
        usage["completion_tokens_details"] = {"reasoning_tokens": tokens.reasoning}
    return usage


# What a tool message says in place of an image or a document its tool returned, by the part's type.
MOVED = {"image_url": "[image: in the next message]", "file": "[document: in the next message]"}


class ToolOutput:
    """The tool messages answering one assistant turn's calls, and the images and documents their
    tools returned.

    Chat Completions takes those only in user messages: OpenAI answers 400 to an image in a tool
    message ("Image URLs are only allowed for messages with role 'user'") and takes only text there,
    and the tool messages must follow the calls with nothing between them. So each is a `MOVED` line
    in its tool message's text, and they go, in the calls' order, at the head of the user message
    that follows them."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.attachments: list[dict[str, Any]] = []

    def add(self, call_id: str, parts: list[dict[str, Any]]) -> None:
        """One call's output as text, `image_url` and `file` parts."""
        texts = [MOVED.get(part["type"]) or part["text"] for part in parts]
        self.attachments.extend(part for part in parts if part["type"] in MOVED)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": "\n".join(texts)})

    def placed(self, user_parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tool messages, then the user message of the attachments and `user_parts` (if any);
        emptied."""
        out, parts = self.messages, [*self.attachments, *user_parts]
        self.messages, self.attachments = [], []
        if parts:
            only_text = all(part["type"] == "text" for part in parts)
            out.append(
                {"role": "user", "content": "\n".join(p["text"] for p in parts) if only_text else parts}
            )
        return out


def sse_data(payload: Mapping[str, Any]) -> bytes:
    """One `data:` event of a Chat Completions stream."""
    return b"data: " + json_bytes(payload) + b"\n\n"


class ChatChunks:
    """The chunks of one Chat Completions stream: the first one (the assistant's role), a delta per
    piece, and the end (the finish reason, the usage chunk when the caller asked for it with
    `stream_options.include_usage`, then `[DONE]`). Every chunk carries the same id, time and model."""

    def __init__(self, *, chunk_id: str, created: int, model: str) -> None:
        self.id = chunk_id
        self.created = created
        self.model = model
        self.started = False

    def head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
        }

    def chunk(self, delta: Mapping[str, Any], *, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse_data({**self.head(), "choices": [choice]})

    def start(self) -> bytes:
        """The role chunk, once: empty after the first call."""
        if self.started:
            return b""
        self.started = True
        return self.chunk({"role": "assistant", "content": ""})

    def end(self, *, finish: str, usage: TranslatedTokens | None, usage_asked: bool) -> bytes:
        """The last chunks: the role chunk if none went yet, the finish reason, the usage chunk when
        asked for, `[DONE]`."""
        out = bytearray(self.start())
        out += self.chunk({}, finish=finish)
        if usage_asked:
            out += sse_data({**self.head(), "choices": [], "usage": chat_usage(usage)})
        out += b"data: [DONE]\n\n"
        return bytes(out)
