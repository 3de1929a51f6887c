"""An OpenAI Chat Completions caller (`/v1/chat/completions`) served by an Anthropic Messages upstream:
what LangChain's ChatOpenAI, the OpenAI Agents SDK and most agent frameworks need to call Claude.

Request (Chat Completions → Messages):
- `system` and `developer` messages become the top-level `system` (joined by a blank line, wherever
  they stood); user and assistant turns become messages, consecutive turns of one role merged (as
  Messages wants them alternating); text parts text blocks, `image_url` parts image blocks (a
  `data:` URL as base64, any other URL by reference), a `file` part holding a PDF's bytes a document
  block; the assistant's `tool_calls` `tool_use` blocks
  (arguments that are not JSON as `{"arguments": "<text>"}`) and each `tool` message a `tool_result`
  block of a user turn, ids kept.
- `max_completion_tokens` or `max_tokens` becomes `max_tokens` (the model's limit when neither is
  given: Messages requires one); `stop` `stop_sequences`; `temperature` (capped at 1, Anthropic's
  top), `top_p` as they are, but `top_p` only without `temperature` (Claude 4.5 and later answer
  400 to both: "cannot both be specified for this model"); `user` `metadata.user_id`.
- `tools` (functions) become tools with the parameters as `input_schema`; `tool_choice`
  none/auto/required/a named function becomes none/auto/any/tool; `parallel_tool_calls: false`
  `disable_parallel_tool_use`.
- `response_format` json_schema (or json_object) becomes a forced tool `json_output` whose input is
  the answer: its arguments come back as the message's text, so the caller gets JSON content as
  Chat Completions gives it.
- `reasoning_effort` low/medium/high becomes `thinking` with a budget of 1,024/8,192/24,576 tokens,
  kept under `max_tokens`; dropped when it does not fit (Anthropic's minimum budget is 1,024), when
  a tool is forced (Anthropic refuses thinking with a forced tool), and while a tool loop is open
  (the last assistant turn called a tool: Anthropic refuses thinking unless that turn starts with
  the signed thinking block it answered, which a Chat Completions history does not carry).
- Dropped, as hints Messages has no use for: `frequency_penalty`, `presence_penalty`, `seed`,
  `logit_bias`, `store`, `metadata`, `service_tier`, `prediction`, `stream_options` (the usage chunk
  is made from the upstream's usage when the caller asks for it), `strict` on a function.
- Refused with a 400 naming the field, as answers of another form: `n` > 1, `logprobs`, audio
  (`modalities` with audio, `audio`, `input_audio` parts), other file parts, tools that are not functions,
  the legacy `function` role.

Answer (Messages → Chat Completions): text blocks joined as the content, `tool_use` blocks as
`tool_calls`, thinking as `reasoning_content` (signatures dropped: they mean something to Anthropic
only); `stop_reason` end_turn/stop_sequence/max_tokens/tool_use/refusal as `finish_reason`
stop/stop/length/tool_calls/content_filter; usage with cache reads and writes counted in
`prompt_tokens` and the reads as `cached_tokens`. Streamed, each Messages event becomes the chunks it
stands for as it arrives (`content`, `reasoning_content`, `tool_calls` with argument pieces), then a
chunk with the finish reason, the usage chunk when `stream_options.include_usage` asked for it, and
`[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from translators import ResponsesAnswer, TranslatedCall, TranslatedTokens, TranslationRefused
from translators.chat_wire import ChatChunks, chat_usage, sse_data
from translators.values import (
    arguments_parsed,
    count,
    data_url,
    error_message,
    event_object,
    obj,
    string,
    text_joined,
)

JSON_TOOL = "json_output"
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_EFFORT_BUDGET = {"minimal": 1024, "low": 1024, "medium": 8192, "high": 24576}
_MIN_BUDGET = 1024
_ERROR_TYPE = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def _image_block(part: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise TranslationRefused("An image_url part needs a URL.", param=f"{param}.image_url")
    if not url.startswith("data:"):
        return {"type": "image", "source": {"type": "url", "url": url}}
    inline = data_url(url)
    if inline is None:
        raise TranslationRefused("A data: URL of an image must be base64.", param=f"{param}.image_url")
    media_type, data = inline
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type or "image/png", "data": data},
    }


def _document_block(part: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    """A `file` part holding a PDF's bytes (`file_data`) as a document block, which Claude reads."""
    inline = data_url(obj(part.get("file")).get("file_data"))
    if inline is None or inline[0] != "application/pdf":
        raise TranslationRefused(
            "Give files to this model as a PDF's base64 data: URL.", param=f"{param}.file.file_data"
        )
    document: dict[str, Any] = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": inline[1]},
    }
    filename = obj(part.get("file")).get("filename")
    if isinstance(filename, str) and filename:
        document["title"] = filename
    return document


def _user_blocks(content: Any, *, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise TranslationRefused("A message's content is a string or a list of parts.", param=param)
    blocks: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        at = f"{param}[{index}]"
        kind = obj(part).get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image_block(part, param=at))
        elif kind == "file":
            blocks.append(_document_block(part, param=at))
        else:
            raise TranslationRefused(f"A {kind!r} part cannot be sent to this model.", param=at)
    return blocks


def _assistant_blocks(message: Mapping[str, Any], *, param: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    content = message.get("content")
    text = text_joined(content, param=f"{param}.content", absent="") if not isinstance(content, list) else ""
    if isinstance(content, list):
        parts = []
        for index, part in enumerate(content):
            kind = obj(part).get("type")
            if kind in ("text", "refusal") and isinstance(part.get(kind), str):
                parts.append(part[kind])
            else:
                raise TranslationRefused(
                    "An assistant's content holds text parts.", param=f"{param}.content[{index}]"
                )
        text = "\n".join(parts)
    if text:
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise TranslationRefused("`tool_calls` is a list.", param=f"{param}.tool_calls")
    for index, call in enumerate(calls or ()):
        function = obj(call).get("function")
        if (
            not isinstance(function, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("name"), str)
        ):
            raise TranslationRefused(
                "A tool call needs an id and a function name.", param=f"{param}.tool_calls[{index}]"
            )
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": arguments_parsed(function.get("arguments")),
            }
        )
    return blocks


def _tool_result(message: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    if not isinstance(message.get("tool_call_id"), str):
        raise TranslationRefused("A tool message needs its tool_call_id.", param=f"{param}.tool_call_id")
    return {
        "type": "tool_result",
        "tool_use_id": message["tool_call_id"],
        "content": text_joined(message.get("content"), param=f"{param}.content", absent=""),
    }


def _conversation(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    if not isinstance(messages, list):
        raise TranslationRefused("`messages` must be a list.", param="messages")
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise TranslationRefused("Each message is an object.", param=where)
        role = message.get("role")
        if role in ("system", "developer"):
            text = text_joined(message.get("content"), param=f"{where}.content", absent="")
            if text:
                system.append(text)
        elif role == "user":
            add("user", _user_blocks(message.get("content"), param=f"{where}.content"))
        elif role == "assistant":
            add("assistant", _assistant_blocks(message, param=where))
        elif role == "tool":
            add("user", [_tool_result(message, param=where)])
        else:
            raise TranslationRefused(
                "A message's role is system, developer, user, assistant or tool on this model.",
                param=f"{where}.role",
            )
    return "\n\n".join(system), turns


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise TranslationRefused("`tools` must be a list.", param="tools")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        function = obj(tool).get("function")
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise TranslationRefused("Only function tools can be given to this model.", param=where)
        if not isinstance(function.get("name"), str):
            raise TranslationRefused("A function needs a name.", param=f"{where}.function.name")
        schema = function.get("parameters")
        converted: dict[str, Any] = {
            "name": function["name"],
            "input_schema": schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
        }
        if isinstance(function.get("description"), str):
            converted["description"] = function["description"]
        out.append(converted)
    return out


def _tool_choice(choice: Any) -> dict[str, Any]:
    if choice == "none":
        return {"type": "none"}
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return {"type": "tool", "name": function["name"]}
    raise TranslationRefused(
        "`tool_choice` is none, auto, required or a named function.", param="tool_choice"
    )


def _json_tool(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        raise TranslationRefused("`response_format` is an object.", param="response_format")
    kind = response_format.get("type")
    if kind == "text":
        return None
    schema: Any = {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = obj(spec).get("schema")
        if not isinstance(schema, dict):
            raise TranslationRefused(
                "A json_schema response format needs its schema.", param="response_format.json_schema"
            )
    elif kind != "json_object":
        raise TranslationRefused(
            "`response_format.type` is text, json_object or json_schema.", param="response_format.type"
        )
    return {"name": JSON_TOOL, "description": "Give the answer as this JSON.", "input_schema": schema}


def _tool_loop_open(turns: list[dict[str, Any]]) -> bool:
    """Whether the last assistant turn called a tool: with thinking on, Anthropic then wants that turn
    to start with the thinking block it signed, which a Chat Completions history cannot carry."""
    for turn in reversed(turns):
        if turn["role"] == "assistant":
            return any(block["type"] == "tool_use" for block in turn["content"])
    return False


class ChatViaMessages:
    """One `/v1/chat/completions` call on a Messages upstream."""

    responses_answer: ResponsesAnswer | None = None  # a caller of another family

    def __init__(self, call: TranslatedCall) -> None:
        self.model = call.model
        self.upstream_model = call.upstream_model
        self.max_tokens = call.max_tokens
        self.created = call.created
        self.tokens: TranslatedTokens | None = None
        self._json = False  # the answer comes as the json_output tool's input
        self._usage_asked = False
        self._chunks = ChatChunks(chunk_id="chatcmpl-", created=call.created, model=call.model)
        self._stopped = False
        self._finish: str | None = None
        self._blocks: dict[int, tuple[str, int]] = {}  # Messages block index -> (kind, tool call index)
        self._calls = 0

    def request_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The Messages body for the caller's Chat Completions body; raises TranslationRefused."""
        for field, refused in (
            ("n", lambda v: v not in (None, 1)),
            ("logprobs", lambda v: v not in (None, False)),
            ("audio", lambda v: v is not None),
        ):
            if refused(body.get(field)):
                raise TranslationRefused(f"`{field}` cannot be served by this model.", param=field)
        modalities = body.get("modalities")
        if isinstance(modalities, list) and any(m != "text" for m in modalities):
            raise TranslationRefused("This model answers in text only.", param="modalities")
        system, turns = _conversation(body.get("messages"))
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = (
            limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else self.max_tokens
        )
        out: dict[str, Any] = {"model": self.upstream_model, "max_tokens": max_tokens, "messages": turns}
        if system:
            out["system"] = system
        temperature = body.get("temperature")
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            out["temperature"] = min(temperature, 1)
        top_p = body.get("top_p")
        if isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and "temperature" not in out:
            out["top_p"] = top_p
        stop = body.get("stop")
        if isinstance(stop, str) and stop:
            out["stop_sequences"] = [stop]
        elif isinstance(stop, list) and stop:
            out["stop_sequences"] = [s for s in stop if isinstance(s, str) and s]
        if isinstance(body.get("user"), str) and body["user"]:
            out["metadata"] = {"user_id": body["user"]}
        tools = _tools(body["tools"]) if body.get("tools") is not None else []
        choice = _tool_choice(body["tool_choice"]) if body.get("tool_choice") is not None else None
        if body.get("response_format") is not None:
            json_tool = _json_tool(body["response_format"])
            if json_tool is not None:
                tools.append(json_tool)
                choice = {"type": "tool", "name": JSON_TOOL}
                self._json = True
        if tools:
            out["tools"] = tools
        if body.get("parallel_tool_calls") is False and tools:
            choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
        if choice is not None and (tools or choice["type"] == "none"):
            out["tool_choice"] = choice
        effort = body.get("reasoning_effort")
        budget = _EFFORT_BUDGET.get(effort) if isinstance(effort, str) else None
        forced = choice is not None and choice["type"] in ("any", "tool")
        if budget is not None and not forced and not _tool_loop_open(turns):
            budget = min(budget, max_tokens - 1)
            if budget >= _MIN_BUDGET:
                out["thinking"] = {"type": "enabled", "budget_tokens": budget}
                out.pop("temperature", None)  # Anthropic takes thinking only at its default temperature
                out.pop("top_p", None)
        if body.get("stream") is True:
            out["stream"] = True
            options = body.get("stream_options")
            self._usage_asked = isinstance(options, dict) and options.get("include_usage") is True
        return out

    # A whole answer.

    def response_body(self, body: Any) -> dict[str, Any]:
        message = obj(body)
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            kind = obj(block).get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                reasoning.append(block["thinking"])
            elif kind == "tool_use":
                arguments = json.dumps(obj(block.get("input")), ensure_ascii=False)
                if self._json and block.get("name") == JSON_TOOL:
                    texts.append(arguments)
                    continue
                calls.append(
                    {
                        "id": string(block.get("id")) or f"call_{len(calls)}",
                        "type": "function",
                        "function": {
                            "name": string(block.get("name")) or "",
                            "arguments": arguments,
                        },
                    }
                )
        self.tokens = _tokens_of(message.get("usage"))
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts) if texts or not calls else None,
        }
        if reasoning:
            reply["reasoning_content"] = "".join(reasoning)
        if calls:
            reply["tool_calls"] = calls
        finish = _FINISH.get(string(message.get("stop_reason")) or "", "stop")
        if self._json and finish == "tool_calls" and not calls:
            finish = "stop"
        msg_id = message.get("id")
        return {
            "id": f"chatcmpl-{msg_id}" if isinstance(msg_id, str) else "chatcmpl-",
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": reply, "finish_reason": finish, "logprobs": None}],
            "usage": chat_usage(self.tokens),
        }

    # A stream, one upstream event at a time.

    def stream_event(self, data: str) -> bytes:
        if self._stopped:
            return b""
        event = event_object(data)
        if event is None:
            return b""
        kind = event.get("type")
        if kind == "message_start":
            message = obj(event.get("message"))
            if isinstance(message.get("id"), str):
                self._chunks.id = f"chatcmpl-{message['id']}"
            self.tokens = _tokens_of(message.get("usage"), before=self.tokens)
            return self._chunks.start()
        out = bytearray(self._chunks.start())
        if kind == "content_block_start":
            out += self._block_start(event)
        elif kind == "content_block_delta":
            out += self._block_delta(event)
        elif kind == "message_delta":
            delta = obj(event.get("delta"))
            if isinstance(delta.get("stop_reason"), str):
                self._finish = _FINISH.get(delta["stop_reason"], "stop")
                if self._json and self._finish == "tool_calls" and not self._calls:
                    self._finish = "stop"
            self.tokens = _tokens_of(event.get("usage"), before=self.tokens)
        elif kind == "message_stop":
            out += self.stream_end()
        elif kind == "error":
            self._stopped = True
            error = obj(event.get("error"))
            said = string(error.get("message")) or "The upstream failed."
            out += sse_data({"error": {"message": said, "type": "server_error", "param": None, "code": None}})
        return bytes(out)

    def stream_end(self) -> bytes:
        if self._stopped:
            return b""
        self._stopped = True
        return self._chunks.end(
            finish=self._finish or "stop", usage=self.tokens, usage_asked=self._usage_asked
        )

    def _block_start(self, event: Mapping[str, Any]) -> bytes:
        index = event.get("index")
        block = obj(event.get("content_block"))
        if not isinstance(index, int) or isinstance(index, bool):
            return b""
        kind = block.get("type")
        if kind == "tool_use" and not (self._json and block.get("name") == JSON_TOOL):
            call = self._calls
            self._calls += 1
            self._blocks[index] = ("tool", call)
            return self._chunks.chunk(
                {
                    "tool_calls": [
                        {
                            "index": call,
                            "id": string(block.get("id")) or f"call_{call}",
                            "type": "function",
                            "function": {
                                "name": string(block.get("name")) or "",
                                "arguments": "",
                            },
                        }
                    ]
                }
            )
        self._blocks[index] = ("json" if kind == "tool_use" else str(kind), 0)
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            return self._chunks.chunk({"content": block["text"]})
        return b""

    def _block_delta(self, event: Mapping[str, Any]) -> bytes:
        index = event.get("index")
        delta = obj(event.get("delta"))
        kind, call = self._blocks.get(index, ("", 0)) if isinstance(index, int) else ("", 0)
        piece_type = delta.get("type")
        if piece_type == "text_delta" and isinstance(delta.get("text"), str):
            return self._chunks.chunk({"content": delta["text"]})
        if piece_type == "thinking_delta" and isinstance(delta.get("thinking"), str):
            return self._chunks.chunk({"reasoning_content": delta["thinking"]})
        if (
            piece_type == "input_json_delta"
            and isinstance(delta.get("partial_json"), str)
            and delta["partial_json"]
        ):
            if kind == "json":
                return self._chunks.chunk({"content": delta["partial_json"]})
            if kind == "tool":
                return self._chunks.chunk(
                    {"tool_calls": [{"index": call, "function": {"arguments": delta["partial_json"]}}]}
                )
        return b""

    # Errors.

    def error_body(self, status: int, body: bytes) -> bytes:
        message = error_message(status, body)
        error_type = _ERROR_TYPE.get(status, "server_error" if status >= 500 else "invalid_request_error")
        return json.dumps(
            {"error": {"message": message, "type": error_type, "param": None, "code": None}}
        ).encode()


def _tokens_of(usage: Any, *, before: TranslatedTokens | None = None) -> TranslatedTokens | None:
    if not isinstance(usage, dict):
        return before
    base = before or TranslatedTokens()

    def pick(field: str, current: int) -> int:
        return count(usage[field]) if usage.get(field) is not None else current

    return TranslatedTokens(
        input=pick("input_tokens", base.input),
        cached=pick("cache_read_input_tokens", base.cached),
        cache_write=pick("cache_creation_input_tokens", base.cache_write),
        output=pick("output_tokens", base.output),
        cache_write_1h=(
            count(obj(usage.get("cache_creation")).get("ephemeral_1h_input_tokens"))
            if "ephemeral_1h_input_tokens" in obj(usage.get("cache_creation"))
            else base.cache_write_1h
        ),
    )
