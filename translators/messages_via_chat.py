"""An Anthropic Messages caller (`/v1/messages`) served by an OpenAI Chat Completions upstream (the
`openai` and `openai-compatible` kinds): what Claude Code needs to call a DeepSeek, vLLM or GPT model.

Request (Messages → Chat Completions):
- `system` (a string or text blocks) becomes the first message, role `system`, its blocks joined by
  a newline, and so does a system message among the turns (Claude Code sends some); each message's
  text and image blocks become content parts (an image's base64 source a `data:` URL, a URL source
  as it is); `tool_use` blocks become the assistant's `tool_calls` and `tool_result` blocks `tool`
  messages with the same call id, placed before the rest of their user turn, as Chat Completions
  wants them right after the calls; an image a tool returned goes at the head of that user turn,
  Chat Completions taking images only from the user (chat_wire.ToolOutput).
- `tools` become functions (their `input_schema` the parameters); `tool_choice` auto/any/tool/none
  becomes auto/required/the named function/none, `disable_parallel_tool_use` `parallel_tool_calls:
  false`.
- `max_tokens` becomes the upstream's output limit (`max_completion_tokens` for OpenAI itself,
  `max_tokens` for compatible servers); `stop_sequences` `stop`; `temperature`, `top_p` as they are,
  but not to an OpenAI model that reasons (GPT-5, the o-series), which answers 400 to any but the
  default 1 ("Unsupported value: 'temperature' does not support 0.2 with this model");
  `metadata.user_id` `user` (its SHA-256 hex digest when longer than OpenAI's 64 characters);
  `thinking` (enabled with a budget, or adaptive) `reasoning_effort` for an OpenAI upstream (low
  under 4,096 budget tokens, medium under 16,384, high above; adaptive is medium), dropped for a
  compatible server, which may not know the field, and for OpenAI's models that do not reason
  (named GPT-3.5, GPT-4 or ChatGPT's), which refuse it.
- Dropped, as hints the upstream cannot use without changing the answer: `top_k`, `cache_control`
  on any block, `context_management`, `service_tier`, `container`, `mcp_servers`, and signed thinking
  blocks in the history (their signatures mean something to Anthropic only). An unsigned one, what
  this translator made of a compatible server's `reasoning_content`, goes back to a compatible
  server as the turn's `reasoning_content`: DeepSeek's thinking mode answers 400 to a tool call
  turn without it ("The reasoning_content in the thinking mode must be passed back").
- A document (a PDF by its bytes) becomes a `file` part for an upstream that reads one (OpenAI, and
  Gemini through the hub); in a tool result for one that does not, a line saying it cannot be
  read, since an agent's history keeps the result and a refusal would refuse every later call.
- Refused with a 400 naming the field: a document the upstream cannot read or other block,
  a server tool (one without an `input_schema`, such as web search).

Answer (Chat Completions → Messages): the first choice's reasoning text (`reasoning_content`, which
DeepSeek and vLLM send) as a thinking block with an empty signature, its text as a text block, each
tool call as a `tool_use` block (arguments that are not a JSON object are given as
`{"arguments": "<text>"}`); `finish_reason` stop/length/tool_calls/content_filter as `stop_reason`
end_turn/max_tokens/tool_use/refusal; usage with the cached prompt tokens as cache reads. Streamed,
each upstream chunk is translated as it arrives into Messages events: `message_start` and a `ping`
first, `content_block_start`/`_delta`/`_stop` per block (`text_delta`, `thinking_delta`,
`input_json_delta` for a tool call's argument pieces), then `message_delta` with the stop reason and
the usage, and `message_stop`. The upstream is always asked for its usage chunk
(`stream_options.include_usage`), so the stream is billed on what it reports.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from typing import Any

from translators import ResponsesAnswer, TranslatedCall, TranslatedTokens, TranslationRefused
from translators.chat_wire import ToolOutput, chat_tokens
from translators.values import (
    arguments_parsed,
    error_message,
    event_object,
    json_bytes,
    obj,
    string,
    text_joined,
)

# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors).
_ERROR_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
_STOP_REASON = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Anthropic's thinking budget as an OpenAI reasoning effort: the budgets at which effort goes up.
_EFFORT_BUDGETS = ((4096, "low"), (16384, "medium"))
_NOT_REASONING = ("gpt-3", "gpt-4", "chatgpt-")  # OpenAI's model names that take no reasoning_effort
PDF = "application/pdf"
READS_DOCUMENTS = frozenset({"openai", "gemini"})  # upstream kinds that read a PDF in a user message
# A tool's PDF, in a tool result sent to a server that reads none.
UNREAD_DOCUMENT = {"type": "text", "text": "[a PDF document: this model cannot read documents]"}
_USER_MAX = 64  # characters of `user` OpenAI takes
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def _image_part(block: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    source = block.get("source")
    if isinstance(source, dict):
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            media_type = string(source.get("media_type")) or "image/png"
            return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{source['data']}"}}
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return {"type": "image_url", "image_url": {"url": source["url"]}}
    raise TranslationRefused(
        "An image block needs a base64 or url source on this model.", param=f"{param}.source"
    )


def _document_part(block: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    """A PDF given by its bytes as a Chat Completions `file` part, which OpenAI reads (and Gemini,
    through chat_via_gemini)."""
    source = obj(block.get("source"))
    if (
        source.get("type") == "base64"
        and source.get("media_type") == PDF
        and isinstance(source.get("data"), str)
    ):
        title = string(block.get("title"))
        return {
            "type": "file",
            "file": {"filename": title or "document.pdf", "file_data": f"data:{PDF};base64,{source['data']}"},
        }
    raise TranslationRefused(
        "A document block needs a base64 PDF source on this model.", param=f"{param}.source"
    )


def _tool_result_parts(block: Mapping[str, Any], *, param: str, documents: bool) -> list[dict[str, Any]]:
    """A tool_result's content as text, `image_url` and `file` parts, "Error: " before the text of an
    error. Without `documents` (a server that reads no PDF), a document is a line saying so: the
    agent's history keeps the result, and a refusal would refuse every later call of the session."""
    value = block.get("content")
    parts: list[dict[str, Any]] = []
    if isinstance(value, str):
        parts.append({"type": "text", "text": value})
    elif isinstance(value, list):
        for index, item in enumerate(value):
            where = f"{param}.content[{index}]"
            kind = obj(item).get("type")
            if kind == "text" and isinstance(item.get("text"), str):
                parts.append({"type": "text", "text": item["text"]})
            elif kind == "image":
                parts.append(_image_part(item, param=where))
            elif kind == "document":
                parts.append(_document_part(item, param=where) if documents else UNREAD_DOCUMENT)
            else:
                raise TranslationRefused(
                    "A tool result can hold text, images and documents on this model.", param=where
                )
    elif value is not None:
        raise TranslationRefused(
            "A tool result's content is a string or a list of blocks.", param=f"{param}.content"
        )
    if block.get("is_error") is True:
        if parts and parts[0]["type"] == "text":
            text = parts.pop(0)["text"]
            parts.insert(0, {"type": "text", "text": f"Error: {text}" if text else "Error"})
        else:
            parts.insert(0, {"type": "text", "text": "Error"})
    return parts


def _user_of(user_id: str) -> str:
    """`metadata.user_id` as Chat Completions' `user`, which OpenAI refuses past `_USER_MAX`
    characters ("Invalid 'user': string too long"): a longer one (Claude Code sends a JSON object of
    about 150) as its SHA-256 hex digest, 64 characters that still tell one caller from another."""
    if len(user_id) <= _USER_MAX:
        return user_id
    return hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()


def _arguments_of(value: Any) -> str:
    return json.dumps(obj(value), ensure_ascii=False, separators=(",", ":"))


def _messages_of(messages: Any, *, upstream_kind: str) -> list[dict[str, Any]]:
    """The Chat Completions messages for an upstream of `upstream_kind`: PDFs as `file` parts where it
    reads them (OpenAI, Gemini); for any but OpenAI itself, the text of an assistant turn's unsigned
    thinking blocks (what this translator made of an upstream's `reasoning_content`) back as the
    message's `reasoning_content`."""
    documents = upstream_kind in READS_DOCUMENTS
    reasoning_back = upstream_kind != "openai"
    if not isinstance(messages, list):
        raise TranslationRefused("`messages` must be a list.", param="messages")
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise TranslationRefused("Each message is an object.", param=where)
        role, content = message.get("role"), message.get("content")
        if role == "system":
            # Claude Code sends some of its instructions as system messages among the turns.
            out.append({"role": "system", "content": text_joined(content, param=f"{where}.content")})
            continue
        if role not in ("user", "assistant"):
            raise TranslationRefused("A message's role is user, assistant or system.", param=f"{where}.role")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise TranslationRefused(
                "A message's content is a string or a list of blocks.", param=f"{where}.content"
            )
        parts: list[dict[str, Any]] = []
        tool_calls: list[dict[str, Any]] = []
        reasoning: list[str] = []
        tool_output = ToolOutput()
        for position, block in enumerate(content):
            at = f"{where}.content[{position}]"
            kind = obj(block).get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append({"type": "text", "text": block["text"]})
            elif kind == "image" and role == "user":
                parts.append(_image_part(block, param=at))
            elif kind == "document" and role == "user" and documents:
                parts.append(_document_part(block, param=at))
            elif kind == "tool_use" and role == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise TranslationRefused("A tool_use block needs a string id and name.", param=at)
                tool_calls.append(
                    {
                        "id": block["id"],
                        "type": "function",
                        "function": {"name": block["name"], "arguments": _arguments_of(block.get("input"))},
                    }
                )
            elif kind == "tool_result" and role == "user":
                if not isinstance(block.get("tool_use_id"), str):
                    raise TranslationRefused("A tool_result block needs a string tool_use_id.", param=at)
                parts_of_result = _tool_result_parts(block, param=at, documents=documents)
                tool_output.add(block["tool_use_id"], parts_of_result)
            elif kind == "thinking" and role == "assistant" and not block.get("signature"):
                if isinstance(block.get("thinking"), str):
                    reasoning.append(block["thinking"])
            elif isinstance(kind, str) and kind in _DROPPED_BLOCKS and role == "assistant":
                continue
            else:
                raise TranslationRefused(
                    f"A {kind!r} block in a {role} message cannot be sent to this model.", param=at
                )
        if role == "assistant":
            text = "\n".join(p["text"] for p in parts)
            assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
            if reasoning and reasoning_back:
                assistant["reasoning_content"] = "".join(reasoning)
            if tool_calls:
                assistant["tool_calls"] = tool_calls
            if assistant["content"] is not None or tool_calls:
                out.append(assistant)
        else:
            out.extend(tool_output.placed(parts))
    return out


def _tools_of(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise TranslationRefused("`tools` must be a list.", param="tools")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise TranslationRefused("Each tool is an object with a string name.", param=where)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise TranslationRefused(
                f"The server tool {tool.get('type', tool['name'])!r} runs only on Anthropic's own models; "
                "on this model give tools with an input_schema.",
                param=where,
            )
        function: dict[str, Any] = {"name": tool["name"], "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice_of(choice: Any) -> tuple[Any, bool | None]:
    """The Chat Completions tool_choice and parallel_tool_calls (None: leave it out)."""
    if not isinstance(choice, dict):
        raise TranslationRefused("`tool_choice` is an object.", param="tool_choice")
    kind = choice.get("type")
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise TranslationRefused(
        "`tool_choice.type` is auto, any, tool (with a name) or none.", param="tool_choice"
    )


def _effort_of(thinking: Any) -> str | None:
    if not isinstance(thinking, dict):
        return None
    if thinking.get("type") == "adaptive":
        return "medium"
    budget = thinking.get("budget_tokens")
    if thinking.get("type") != "enabled" or not isinstance(budget, int) or isinstance(budget, bool):
        return None
    for below, effort in _EFFORT_BUDGETS:
        if budget < below:
            return effort
    return "high"


def _reasons(upstream_model: str) -> bool:
    """Whether an OpenAI model takes `reasoning_effort`: all but those named as GPT-3.5, GPT-4 (4o,
    4.1, 4.5) or ChatGPT's, which answer 400 "Unsupported parameter: 'reasoning_effort'" (Claude
    Code asks every model to think)."""
    name = upstream_model.lower().rsplit("/", 1)[-1].removeprefix("ft:")
    return not name.startswith(_NOT_REASONING)


def _response_format_of(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """Anthropic's structured output (`output_config.format`, or the earlier `output_format`) as a
    Chat Completions `response_format`: a JSON schema the answer must follow, strictly, as Anthropic
    guarantees it. None when the caller asked for none."""
    for param, value in (
        ("output_config.format", obj(body.get("output_config")).get("format")),
        ("output_format", body.get("output_format")),
    ):
        if value is None:
            continue
        if not isinstance(value, dict) or value.get("type") != "json_schema":
            raise TranslationRefused(f"`{param}.type` is json_schema.", param=f"{param}.type")
        if not isinstance(value.get("schema"), dict):
            raise TranslationRefused(f"`{param}.schema` is a JSON schema object.", param=f"{param}.schema")
        return {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": value["schema"], "strict": True},
        }
    return None


def _usage_body(tokens: TranslatedTokens | None) -> dict[str, int]:
    tokens = tokens or TranslatedTokens()
    return {
        "input_tokens": tokens.input,
        "cache_creation_input_tokens": tokens.cache_write,
        "cache_read_input_tokens": tokens.cached,
        "output_tokens": tokens.output,
    }


def _event(name: str, payload: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json_bytes(payload) + b"\n\n"


class MessagesViaChat:
    """One `/v1/messages` call on a Chat Completions upstream: OpenAI itself (the `openai` kind) or a
    compatible server."""

    responses_answer: ResponsesAnswer | None = None  # a caller of another family

    def __init__(self, call: TranslatedCall) -> None:
        self.model = call.model
        self.upstream_model = call.upstream_model
        self.upstream_kind = call.upstream_kind
        self.openai = call.upstream_kind == "openai"
        self.reasons = self.openai and _reasons(call.upstream_model)
        self.tokens: TranslatedTokens | None = None
        # Stream state: the message started, the open block (kind and index), the calls seen.
        self._started = False
        self._stopped = False
        self._block: str | None = None
        self._index = -1
        self._call_blocks: dict[int, int] = {}
        self._stop_reason: str | None = None
        self._id = f"msg_{secrets.token_hex(12)}"

    # The request.

    def request_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The Chat Completions body for the caller's Messages body; raises TranslationRefused."""
        messages = _messages_of(body.get("messages"), upstream_kind=self.upstream_kind)
        if "system" in body and body["system"] is not None:
            system = text_joined(body["system"], param="system")
            if system:
                messages.insert(0, {"role": "system", "content": system})
        out: dict[str, Any] = {"model": self.upstream_model, "messages": messages}
        max_tokens = body.get("max_tokens")
        if max_tokens is not None:
            out["max_completion_tokens" if self.openai else "max_tokens"] = max_tokens
        for name in ("temperature", "top_p"):
            if body.get(name) is not None and not self.reasons:
                out[name] = body[name]
        stop = body.get("stop_sequences")
        if isinstance(stop, list) and stop:
            out["stop"] = stop
        if body.get("tools") is not None:
            tools = _tools_of(body["tools"])
            if tools:
                out["tools"] = tools
        if body.get("tool_choice") is not None:
            choice, parallel = _tool_choice_of(body["tool_choice"])
            if "tools" in out or choice == "none":
                out["tool_choice"] = choice
            if parallel is not None and "tools" in out:
                out["parallel_tool_calls"] = parallel
        metadata = body.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
            out["user"] = _user_of(metadata["user_id"])
        response_format = _response_format_of(body)
        if response_format is not None:
            out["response_format"] = response_format
        effort = _effort_of(body.get("thinking"))
        if effort is not None and self.reasons:
            out["reasoning_effort"] = effort
        if body.get("stream") is True:
            out["stream"] = True
            out["stream_options"] = {"include_usage": True}
        return out

    # A whole answer.

    def response_body(self, body: Any) -> dict[str, Any]:
        """The Messages answer for a Chat Completions answer."""
        choices = obj(body).get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = obj(choice.get("message"))
        content: list[dict[str, Any]] = []
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        for field in ("content", "refusal"):
            if isinstance(message.get(field), str) and message[field]:
                content.append({"type": "text", "text": message[field]})
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = obj(call).get("function")
            if isinstance(function, dict):
                content.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id")
                        if isinstance(call.get("id"), str)
                        else f"toolu_{secrets.token_hex(12)}",
                        "name": string(function.get("name")) or "",
                        "input": arguments_parsed(function.get("arguments")),
                    }
                )
        self.tokens = chat_tokens(obj(body).get("usage"))
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": _STOP_REASON.get(string(choice.get("finish_reason")) or "", "end_turn"),
            "stop_sequence": None,
            "usage": _usage_body(self.tokens),
        }

    # A stream, one upstream event at a time.

    def stream_event(self, data: str) -> bytes:
        """The caller's bytes for one upstream event's data (a chunk, `[DONE]` or an error)."""
        if self._stopped:
            return b""
        if data.strip() == "[DONE]":
            return self.stream_end()
        chunk = event_object(data)
        if chunk is None:
            return b""
        if isinstance(chunk.get("error"), dict):
            self._stopped = True
            error = chunk["error"]
            message = string(error.get("message")) or "The upstream failed."
            return _event("error", {"type": "error", "error": {"type": "api_error", "message": message}})
        out = bytearray(self._start())
        if chunk.get("usage") is not None:
            self.tokens = chat_tokens(chunk["usage"]) or self.tokens
        choices = chunk.get("choices")
        choice = (
            choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        )
        if choice is None:
            return bytes(out)
        delta = obj(choice.get("delta"))
        reasoning = delta.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            out += self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out += self._delta({"type": "thinking_delta", "thinking": reasoning})
        for field in ("content", "refusal"):
            text = delta.get(field)
            if isinstance(text, str) and text:
                out += self._open("text", {"type": "text", "text": ""})
                out += self._delta({"type": "text_delta", "text": text})
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict):
                out += self._tool_call_piece(call)
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self._stop_reason = _STOP_REASON.get(reason, "end_turn")
        return bytes(out)

    def stream_end(self) -> bytes:
        """What ends the caller's stream once the upstream's has ended: the open block's stop, the stop
        reason with the usage, `message_stop`. Nothing when it has already ended."""
        if self._stopped:
            return b""
        self._stopped = True
        out = bytearray(self._start())
        out += self._close()
        out += _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop_reason or "end_turn", "stop_sequence": None},
                "usage": _usage_body(self.tokens),
            },
        )
        out += _event("message_stop", {"type": "message_stop"})
        return bytes(out)

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage_body(None),
        }
        return _event("message_start", {"type": "message_start", "message": message}) + _event(
            "ping", {"type": "ping"}
        )

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        self._block = None
        return _event("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def _open(self, kind: str, block: Mapping[str, Any]) -> bytes:
        if self._block == kind:
            return b""
        out = self._close()
        self._block, self._index = kind, self._index + 1
        return out + _event(
            "content_block_start",
            {"type": "content_block_start", "index": self._index, "content_block": block},
        )

    def _delta(self, delta: Mapping[str, Any]) -> bytes:
        return _event(
            "content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta}
        )

    def _tool_call_piece(self, call: Mapping[str, Any]) -> bytes:
        index_given = call.get("index")
        position = index_given if isinstance(index_given, int) else 0
        function = obj(call.get("function"))
        out = bytearray()
        index = self._call_blocks.get(position)
        if index is None:
            block = {
                "type": "tool_use",
                "id": string(call.get("id")) or f"toolu_{secrets.token_hex(12)}",
                "name": string(function.get("name")) or "",
                "input": {},
            }
            out += self._open(f"tool:{position}", block)
            index = self._call_blocks[position] = self._index
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            # A piece of an earlier call after another began (no provider interleaves them, but the
            # format allows it) goes to that call's block by its index: nothing is dropped.
            out += _event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": arguments},
                },
            )
        return bytes(out)

    # Errors.

    def error_body(self, status: int, body: bytes) -> bytes:
        """The caller's error body for an upstream's error answer: Anthropic's shape, the upstream's
        message kept."""
        message = error_message(status, body)
        error_type = _ERROR_TYPE.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return json.dumps({"type": "error", "error": {"type": error_type, "message": message}}).encode()
