"""An OpenAI Responses caller (`/v1/responses`) served by a Chat Completions upstream (`openai-compatible`):
what the OpenAI Agents SDK and LangChain's Responses mode need to call a DeepSeek, vLLM or Ollama model.

Request (Responses → Chat Completions):
- `instructions` becomes the first message, role `system`; `input` (a string, or items) the messages:
  a message item (with or without `"type": "message"`; roles user, assistant, system, developer)
  with its `input_text`/`output_text` parts as text and `input_image` parts as `image_url`;
  consecutive `function_call` items one assistant message with those `tool_calls` (call ids kept);
  a `function_call_output` a `tool` message (an image in its output, as Codex's view_image gives,
  goes in a user message after the run of tool messages: chat_wire.ToolOutput). OpenAI's reasoning
  items (with `encrypted_content`) are dropped, as meaning something to OpenAI only; the text of
  one this translator made of a server's `reasoning_content` goes back as the next assistant
  message's `reasoning_content`, which DeepSeek's thinking mode requires of a tool call turn.
- `tools` of type function become functions (a `namespace` of functions, as Codex groups some, is
  flattened into its functions); `tool_choice` and `parallel_tool_calls` as they are (a named
  function's form changed), only with tools; `max_output_tokens` `max_tokens`; `temperature`,
  `top_p`, `user` as they are; `text.format` json_object/json_schema `response_format`.
- Dropped, as hints a Chat Completions server has no use for: `store`, `include`, `reasoning`,
  `prompt_cache_key`, `client_metadata`, `metadata`, `service_tier`, `truncation`,
  `text.verbosity`, `safety_identifier`, `stream_options`.
- `previous_response_id` is echoed in the answer: the gateway has put the conversation it names in
  `input` by then, as it does each `item_reference`'s item (chat/response_store.py).
- Refused with a 400 naming the field, as what only OpenAI's Responses API can do: `conversation`,
  `background`, server tools (web search, file search, code interpreter, computer use, image
  generation, MCP, custom tools), an `input_file` given by id or URL (one given by its bytes is a
  `file` part) and audio parts, and other item types.

Answer (Chat Completions → Responses): a `response` object whose `output` holds a reasoning item for
`reasoning_content` (DeepSeek, vLLM), a message item with the text, and a `function_call` item per
tool call; `status` completed, or incomplete (`max_output_tokens`) when the upstream stopped at its
limit; usage with cached input tokens. Streamed, the events of the Responses grammar, each with its
`sequence_number`: `response.created`, `response.in_progress`, then per item
`response.output_item.added`, its deltas (`response.output_text.delta` with the content part's
events, `response.function_call_arguments.delta`, `response.reasoning_summary_text.delta`) and
`.done` events, and `response.completed` (or `response.incomplete`) with the whole response.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from translators import ResponsesAnswer, TranslatedCall, TranslatedTokens, TranslationRefused
from translators.chat_wire import ToolOutput, chat_tokens
from translators.values import error_message, event_object, json_bytes, obj, string

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def _message_content(content: Any, *, role: str, param: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TranslationRefused("A message's content is a string or a list of parts.", param=param)
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        at = f"{param}[{index}]"
        kind = obj(part).get("type")
        text = string(obj(part).get("text"))
        if isinstance(kind, str) and kind in _TEXT_PARTS and text is not None:
            parts.append({"type": "text", "text": text})
        elif kind == "refusal" and string(obj(part).get("refusal")) is not None:
            parts.append({"type": "text", "text": obj(part)["refusal"]})
        elif kind == "input_image" and role == "user":
            parts.append(_image_part(part, param=at))
        elif kind == "input_file" and role == "user" and string(obj(part).get("file_data")):
            filename = string(obj(part).get("filename")) or "document.pdf"
            parts.append(
                {"type": "file", "file": {"filename": filename, "file_data": obj(part)["file_data"]}}
            )
        else:
            raise TranslationRefused(f"A {kind!r} part cannot be sent to this model.", param=at)
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _image_part(part: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    url = string(part.get("image_url"))
    if not url:
        raise TranslationRefused("An input_image part needs an image_url on this model.", param=param)
    image: dict[str, Any] = {"url": url}
    if string(part.get("detail")):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _output_parts(value: Any, *, param: str) -> list[dict[str, Any]]:
    """A function call's output as text and `image_url` parts: a string, its parts' text and images
    (what Codex's view_image returns), or any other JSON as its text."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list):
        return [{"type": "text", "text": json.dumps(value)}]
    return [
        _image_part(part, param=f"{param}[{index}]")
        if obj(part).get("type") == "input_image"
        else {"type": "text", "text": string(obj(part).get("text")) or ""}
        for index, part in enumerate(value)
    ]


def _reasoning_text(item: Mapping[str, Any]) -> list[str]:
    """The text of a reasoning item this translator made of a server's `reasoning_content` (its
    summary; it has no `encrypted_content`); none for OpenAI's own, which mean something to OpenAI
    only."""
    if item.get("encrypted_content") is not None:
        return []
    summary, content = item.get("summary"), item.get("content")
    return [
        text
        for part in [
            *(summary if isinstance(summary, list) else ()),
            *(content if isinstance(content, list) else ()),
        ]
        if (text := string(obj(part).get("text")))
    ]


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    if not isinstance(items, list):
        raise TranslationRefused("`input` is a string or a list of items.", param="input")
    outputs = ToolOutput()  # the function call outputs since the last other item
    reasoning: list[str] = []  # the text of reasoning items not yet given to an assistant message

    def assistant(message: dict[str, Any]) -> dict[str, Any]:
        if reasoning:
            message["reasoning_content"] = message.get("reasoning_content", "") + "".join(reasoning)
            reasoning.clear()
        return message

    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise TranslationRefused("Each input item is an object.", param=where)
        kind = item.get("type", "message")
        if kind not in ("function_call_output", "reasoning"):
            messages.extend(outputs.placed([]))
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise TranslationRefused(
                    "A message's role is user, assistant, system or developer.", param=f"{where}.role"
                )
            content = _message_content(item.get("content"), role=role, param=f"{where}.content")
            message = {"role": "system" if role == "developer" else role, "content": content}
            messages.append(assistant(message) if role == "assistant" else message)
        elif kind == "function_call":
            call_id, name = string(item.get("call_id")), string(item.get("name"))
            if not call_id or not name:
                raise TranslationRefused("A function_call item needs a call_id and a name.", param=where)
            arguments = string(item.get("arguments")) or "{}"
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                assistant(last)["tool_calls"].append(call)
            else:
                messages.append(assistant({"role": "assistant", "content": None, "tool_calls": [call]}))
        elif kind == "function_call_output":
            call_id = string(item.get("call_id"))
            if not call_id:
                raise TranslationRefused("A function_call_output item needs a call_id.", param=where)
            outputs.add(call_id, _output_parts(item.get("output"), param=f"{where}.output"))
        elif kind == "reasoning":
            reasoning.extend(_reasoning_text(item))
        else:
            raise TranslationRefused(
                f"An input item of type {kind!r} cannot be sent to this model.", param=where
            )
    messages.extend(outputs.placed([]))
    return messages


def _function(tool: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    name = string(tool.get("name"))
    if not name:
        raise TranslationRefused("A function tool needs a name.", param=param)
    function: dict[str, Any] = {"name": name, "parameters": obj(tool.get("parameters")) or {"type": "object"}}
    if string(tool.get("description")):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise TranslationRefused("`tools` must be a list.", param="tools")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        kind = obj(tool).get("type")
        if kind == "function":
            out.append(_function(obj(tool), param=where))
        elif kind == "namespace" and isinstance(obj(tool).get("tools"), list):
            for position, inner in enumerate(obj(tool)["tools"]):
                if obj(inner).get("type") != "function":
                    raise TranslationRefused(
                        "Only function tools can be given to this model.", param=f"{where}.tools[{position}]"
                    )
                out.append(_function(obj(inner), param=f"{where}.tools[{position}]"))
        else:
            raise TranslationRefused(
                f"The {kind!r} tool runs only on OpenAI's Responses API; give function tools to this model.",
                param=where,
            )
    return out


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if obj(choice).get("type") == "function" and string(obj(choice).get("name")):
        return {"type": "function", "function": {"name": obj(choice)["name"]}}
    raise TranslationRefused(
        "`tool_choice` is auto, none, required or a named function here.", param="tool_choice"
    )


def _response_format(text: Any) -> dict[str, Any] | None:
    spec = obj(obj(text).get("format"))
    kind = spec.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {key: spec[key] for key in ("name", "schema", "strict", "description") if key in spec}
        return {"type": "json_schema", "json_schema": schema}
    raise TranslationRefused("`text.format.type` is text, json_object or json_schema.", param="text.format")


def _usage_body(tokens: TranslatedTokens | None) -> dict[str, Any]:
    tokens = tokens or TranslatedTokens()
    prompt = tokens.input + tokens.cached + tokens.cache_write
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": tokens.cached},
        "output_tokens": tokens.output,
        "output_tokens_details": {"reasoning_tokens": tokens.reasoning},
        "total_tokens": prompt + tokens.output,
    }


class ResponsesViaChat:
    """One `/v1/responses` call on a Chat Completions upstream."""

    def __init__(self, call: TranslatedCall) -> None:
        self.model = call.model
        self.upstream_model = call.upstream_model
        self.openai = call.upstream_kind == "openai"
        self.created = call.created
        self.tokens: TranslatedTokens | None = None
        self._echo: dict[str, Any] = {}
        self._id = f"resp_{secrets.token_hex(16)}"
        # The answer's items so far, whole, as the final response lists them.
        self._items: list[dict[str, Any]] = []
        # Stream state: the events numbered, started and stopped, the open item.
        self._sequence = 0
        self._started = False
        self._stopped = False
        self._open: dict[str, Any] | None = None
        self._calls: dict[int, dict[str, Any]] = {}  # the upstream's tool call index -> its item
        self._finish: str | None = None
        self._whole: dict[str, Any] | None = None  # the final response object, once made

    @property
    def responses_answer(self) -> ResponsesAnswer | None:
        return ResponsesAnswer(response_id=self._id, items=self._items, response=self._whole)

    def request_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        if body.get("conversation") is not None:
            raise TranslationRefused(
                "`conversation` needs OpenAI's Responses API; send the whole conversation, or continue "
                "it by `previous_response_id`.",
                param="conversation",
            )
        if body.get("background") is True:
            raise TranslationRefused("Background responses need OpenAI's Responses API.", param="background")
        out: dict[str, Any] = {"model": self.upstream_model, "messages": _messages(body)}
        limit = body.get("max_output_tokens")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            out["max_completion_tokens" if self.openai else "max_tokens"] = limit
        for name in ("temperature", "top_p", "user"):
            if body.get(name) is not None:
                out[name] = body[name]
        tools = _tools(body["tools"]) if body.get("tools") is not None else []
        if (
            tools
        ):  # Chat Completions refuses the other two without tools ("only allowed when tools are specified")
            out["tools"] = tools
            if body.get("parallel_tool_calls") is not None:
                out["parallel_tool_calls"] = body["parallel_tool_calls"]
            if body.get("tool_choice") is not None:
                out["tool_choice"] = _tool_choice(body["tool_choice"])
        if body.get("text") is not None:
            response_format = _response_format(body["text"])
            if response_format is not None:
                out["response_format"] = response_format
        if body.get("stream") is True:
            out["stream"] = True
            out["stream_options"] = {"include_usage": True}
        # What the response object repeats of the request.
        self._echo = {
            "instructions": body.get("instructions") if isinstance(body.get("instructions"), str) else None,
            "max_output_tokens": limit if isinstance(limit, int) else None,
            "tools": body.get("tools") if isinstance(body.get("tools"), list) else [],
            "tool_choice": body.get("tool_choice") or "auto",
            "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
            "previous_response_id": string(body.get("previous_response_id")),
            "store": body.get("store") is not False,
        }
        return out

    # A whole answer.

    def response_body(self, body: Any) -> dict[str, Any]:
        answer = obj(body)
        choices = answer.get("choices")
        choice = obj(choices[0]) if isinstance(choices, list) and choices else {}
        message = obj(choice.get("message"))
        output = self._items  # each item's id is numbered by its place
        reasoning = string(message.get("reasoning_content"))
        if reasoning:
            output.append(self._reasoning_item(reasoning))
        text = string(message.get("content")) or string(message.get("refusal"))
        if text:
            output.append(self._message_item(text))
        calls = message.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else ()):
            function = obj(obj(call).get("function"))
            call_id = string(obj(call).get("id")) or f"call_{position}"
            output.append(
                self._call_item(
                    call_id, string(function.get("name")) or "", string(function.get("arguments")) or ""
                )
            )
        self.tokens = chat_tokens(answer.get("usage"))
        self._finish = string(choice.get("finish_reason"))
        return self._response(output=output, final=True)

    # A stream, one upstream event at a time.

    def stream_event(self, data: str) -> bytes:
        if self._stopped:
            return b""
        if data.strip() == "[DONE]":
            return self.stream_end()
        chunk = event_object(data)
        if chunk is None:
            return b""
        if isinstance(chunk.get("error"), dict):
            self._stopped = True
            message = string(chunk["error"].get("message")) or "The upstream failed."
            return self._event("error", {"code": "upstream_error", "message": message, "param": None})
        out = bytearray(self._start())
        if chunk.get("usage") is not None:
            self.tokens = chat_tokens(chunk["usage"]) or self.tokens
        choices = chunk.get("choices")
        choice = obj(choices[0]) if isinstance(choices, list) and choices else None
        if choice is None:
            return bytes(out)
        delta = obj(choice.get("delta"))
        reasoning = string(delta.get("reasoning_content"))
        if reasoning:
            out += self._text_piece("reasoning", reasoning)
        for field in ("content", "refusal"):
            text = string(delta.get(field))
            if text:
                out += self._text_piece("message", text)
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            out += self._call_piece(obj(call))
        if string(choice.get("finish_reason")):
            self._finish = choice["finish_reason"]
        return bytes(out)

    def stream_end(self) -> bytes:
        if self._stopped:
            return b""
        self._stopped = True
        out = bytearray(self._start())
        out += self._close()
        response = self._response(output=self._items, final=True)
        name = "response.completed" if response["status"] == "completed" else "response.incomplete"
        out += self._event(name, {"response": response})
        return bytes(out)

    def error_body(self, status: int, body: bytes) -> bytes:
        error_type = "server_error" if status >= 500 else "invalid_request_error"
        error = {"message": error_message(status, body), "type": error_type, "param": None, "code": None}
        return json.dumps({"error": error}).encode()

    # The response object and its items.

    def _response(self, *, output: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        incomplete = final and self._finish == "length"
        status = "incomplete" if incomplete else ("completed" if final else "in_progress")
        response = {
            "id": self._id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None,
            "model": self.model,
            "output": output,
            "usage": _usage_body(self.tokens) if final else None,
            "temperature": None,
            "top_p": None,
            "text": {"format": {"type": "text"}},
            **self._echo,
        }
        if final:
            self._whole = response
        return response

    def _reasoning_item(self, text: str) -> dict[str, Any]:
        return {
            "type": "reasoning",
            "id": f"rs_{len(self._items)}_{self._id}",
            "summary": [{"type": "summary_text", "text": text}],
        }

    def _message_item(self, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"msg_{len(self._items)}_{self._id}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def _call_item(self, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{len(self._items)}_{self._id}",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }

    def _event(self, name: str, payload: Mapping[str, Any]) -> bytes:
        data = json_bytes({"type": name, "sequence_number": self._sequence, **payload})
        self._sequence += 1
        return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        response = self._response(output=[], final=False)
        return self._event("response.created", {"response": response}) + self._event(
            "response.in_progress", {"response": response}
        )

    def _begin(self, item: dict[str, Any]) -> bytes:
        """Open `item` (closing the open one): its `output_item.added` and, for a message, its part."""
        out = bytearray(self._close())
        self._open = item
        index = len(self._items)
        added = {**item, "status": "in_progress"} if item["type"] != "reasoning" else {**item, "summary": []}
        if item["type"] == "message":
            added["content"] = []
        out += self._event("response.output_item.added", {"output_index": index, "item": added})
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            out += self._event(
                "response.content_part.added",
                {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
            )
        elif item["type"] == "reasoning":
            out += self._event(
                "response.reasoning_summary_part.added",
                {
                    "item_id": item["id"],
                    "output_index": index,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""},
                },
            )
        return bytes(out)

    def _close(self) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        index = len(self._items)
        self._items.append(item)
        out = bytearray()
        if item["type"] == "message":
            text = item["content"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out += self._event("response.output_text.done", {**where, "text": text})
            out += self._event("response.content_part.done", {**where, "part": item["content"][0]})
        elif item["type"] == "reasoning":
            text = item["summary"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
            out += self._event("response.reasoning_summary_text.done", {**where, "text": text})
            out += self._event("response.reasoning_summary_part.done", {**where, "part": item["summary"][0]})
        else:
            out += self._event(
                "response.function_call_arguments.done",
                {"item_id": item["id"], "output_index": index, "arguments": item["arguments"]},
            )
        out += self._event("response.output_item.done", {"output_index": index, "item": item})
        return bytes(out)

    def _text_piece(self, kind: str, text: str) -> bytes:
        out = bytearray()
        if self._open is None or self._open["type"] != kind:
            out += self._begin(self._message_item("") if kind == "message" else self._reasoning_item(""))
        item = self._open
        assert item is not None
        index = len(self._items)
        if kind == "message":
            item["content"][0]["text"] += text
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out += self._event("response.output_text.delta", {**where, "delta": text})
        else:
            item["summary"][0]["text"] += text
            where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
            out += self._event("response.reasoning_summary_text.delta", {**where, "delta": text})
        return bytes(out)

    def _call_piece(self, call: Mapping[str, Any]) -> bytes:
        given = call.get("index")
        position = given if isinstance(given, int) and not isinstance(given, bool) else 0
        function = obj(call.get("function"))
        out = bytearray()
        item = self._calls.get(position)
        if item is None:
            call_id = string(call.get("id")) or f"call_{position}"
            item = self._call_item(call_id, string(function.get("name")) or "", "")
            self._calls[position] = item
            out += self._begin(item)
        arguments = string(function.get("arguments"))
        if arguments:
            item["arguments"] += arguments
            index = len(self._items) if item is self._open else self._items.index(item)
            out += self._event(
                "response.function_call_arguments.delta",
                {"item_id": item["id"], "output_index": index, "delta": arguments},
            )
        return bytes(out)
