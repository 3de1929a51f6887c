"""An OpenAI Chat Completions caller served by Google's Gemini generateContent API (the `gemini` kind);
`/v1/messages` and `/v1/responses` reach Gemini through it (translators/chained.py).

Request (Chat Completions → generateContent):
- `system` and `developer` messages become `systemInstruction`; user and assistant turns `contents`
  with roles user and model (consecutive turns of one role merged); text parts `text` parts, an
  image given as a `data:` URL an `inlineData` part (Gemini needs an image's bytes; the pipeline
  downloads a caller's http(s) image links and gives this translator a body with their bytes as
  `data:` URLs, chat/image_links.py, so a link that reaches it is refused), and so a `file` part
  given by its bytes (`file_data`, a PDF as OpenAI takes one); the assistant's
  `tool_calls` `functionCall` parts (ids kept) and each `tool` message a `functionResponse` part
  named after the call it answers. Gemini 3 refuses a history whose function calls lack the thought
  signatures it gave them, which a Chat Completions history cannot carry: for a model not named as
  1.x or 2.x, the first call of each model turn carries Google's placeholder signature instead.
- `tools` (functions) become `functionDeclarations` with the parameters as `parametersJsonSchema`;
  `tool_choice` none/auto/required/a named function becomes the calling mode NONE/AUTO/ANY/ANY with
  that function allowed.
- `max_completion_tokens` or `max_tokens` becomes `maxOutputTokens`; `temperature`, `top_p`, `stop`
  `temperature`, `topP`, `stopSequences`; `response_format` json_object/json_schema
  `responseMimeType: application/json` (with `responseJsonSchema`); `reasoning_effort`
  low/medium/high a thinking budget of 1,024/8,192/24,576 tokens, its thoughts included.
- Dropped: `user`, `parallel_tool_calls`, `seed`, penalties, `logit_bias`, `store`, `metadata`,
  `service_tier`, `stream_options` (the usage chunk is made from Gemini's `usageMetadata` when asked).
- Refused with a 400 naming the field: `n` > 1, `logprobs`, audio, a file given by id, an image
  URL that is not a `data:` URL, tools that are not functions.

Answer (generateContent → Chat Completions): the first candidate's text parts as the content, its
thought parts as `reasoning_content`, its `functionCall` parts as `tool_calls` (an id made when Gemini
gave none); `finishReason` STOP as stop (tool_calls when it called a function), MAX_TOKENS as
length, the safety reasons as content_filter; usage with `cachedContentTokenCount` as cached tokens
and thoughts counted as output. Streamed, each answer piece becomes the chunks it stands for as it
arrives, then the finish chunk, the usage chunk when asked, and `[DONE]`.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
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

_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}
_FILTERED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})
_EFFORT_BUDGET = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
# Google's placeholder thought signature for function calls the model did not make (a history from
# another model or client), base64 as the API's bytes fields are (ai.google.dev, "Thought signatures").
FOREIGN_CALL_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode()


def _image_part(part: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    url = string(obj(part.get("image_url")).get("url")) or string(part.get("image_url"))
    if not url or not url.startswith("data:"):
        raise TranslationRefused(
            "Give images to this model as base64 data: URLs or as http(s) links.",
            param=f"{param}.image_url",
        )
    return _inline(url, default_type="image/png", what="an image", param=f"{param}.image_url")


def _file_part(part: Mapping[str, Any], *, param: str) -> dict[str, Any]:
    """A file given by its bytes (`file_data`, as OpenAI takes a PDF); one given by id is refused."""
    data = string(obj(part.get("file")).get("file_data"))
    if not data or not data.startswith("data:"):
        raise TranslationRefused("Give files to this model as base64 data: URLs.", param=f"{param}.file")
    return _inline(data, default_type="application/pdf", what="a file", param=f"{param}.file.file_data")


def _inline(url: str, *, default_type: str, what: str, param: str) -> dict[str, Any]:
    """A base64 `data:` URL as an `inlineData` part."""
    inline = data_url(url)
    if inline is None:
        raise TranslationRefused(f"A data: URL of {what} must be base64.", param=param)
    media_type, data = inline
    return {"inlineData": {"mimeType": media_type or default_type, "data": data}}


def _user_parts(content: Any, *, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    if not isinstance(content, list):
        raise TranslationRefused("A message's content is a string or a list of parts.", param=param)
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        at = f"{param}[{index}]"
        kind = obj(part).get("type")
        text = string(obj(part).get("text"))
        if kind == "text" and text is not None:
            parts.append({"text": text})
        elif kind == "image_url":
            parts.append(_image_part(obj(part), param=at))
        elif kind == "file":
            parts.append(_file_part(obj(part), param=at))
        else:
            raise TranslationRefused(f"A {kind!r} part cannot be sent to this model.", param=at)
    return parts


def _contents(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    if not isinstance(messages, list):
        raise TranslationRefused("`messages` must be a list.", param="messages")
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}  # a tool call's id -> its function's name, for the answer to it

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = obj(message).get("role")
        if not isinstance(message, dict):
            raise TranslationRefused("Each message is an object.", param=where)
        if role in ("system", "developer"):
            text = text_joined(message.get("content"), param=f"{where}.content", absent="")
            if text:
                system.append(text)
        elif role == "user":
            add("user", _user_parts(message.get("content"), param=f"{where}.content"))
        elif role == "assistant":
            parts: list[dict[str, Any]] = []
            text = text_joined(message.get("content"), param=f"{where}.content", absent="")
            if text:
                parts.append({"text": text})
            calls = message.get("tool_calls")
            for position, call in enumerate(calls if isinstance(calls, list) else ()):
                function = obj(obj(call).get("function"))
                name, call_id = string(function.get("name")), string(obj(call).get("id"))
                if not name or not call_id:
                    raise TranslationRefused(
                        "A tool call needs an id and a function name.",
                        param=f"{where}.tool_calls[{position}]",
                    )
                call_names[call_id] = name
                parts.append(
                    {
                        "functionCall": {
                            "id": call_id,
                            "name": name,
                            "args": arguments_parsed(function.get("arguments")),
                        }
                    }
                )
            add("model", parts)
        elif role == "tool":
            call_id = string(message.get("tool_call_id"))
            if not call_id or call_id not in call_names:
                raise TranslationRefused(
                    "A tool message must answer a tool call of an earlier assistant message.",
                    param=f"{where}.tool_call_id",
                )
            output = text_joined(message.get("content"), param=f"{where}.content", absent="")
            add(
                "user",
                [
                    {
                        "functionResponse": {
                            "id": call_id,
                            "name": call_names[call_id],
                            "response": {"content": output},
                        }
                    }
                ],
            )
        else:
            raise TranslationRefused(
                "A message's role is system, developer, user, assistant or tool on this model.",
                param=f"{where}.role",
            )
    return "\n\n".join(system), contents


def _validates_signatures(upstream_model: str) -> bool:
    """Whether the model refuses a function call of its own without its thought signature: Gemini 3
    and later (and any model its name does not date, such as a `-latest` alias); 1.x and 2.x do not."""
    generation = re.search(r"gemini-(\d+)", upstream_model)
    return generation is None or int(generation.group(1)) >= 3


def _sign_calls(contents: list[dict[str, Any]]) -> None:
    """Give the first function call of each model turn the signature Google documents for calls the
    model did not make itself: the caller's history cannot carry the one Gemini gave (as Gemini signs
    them, only the first of parallel calls)."""
    for content in contents:
        if content["role"] == "model":
            for part in content["parts"]:
                if "functionCall" in part:
                    part["thoughtSignature"] = FOREIGN_CALL_SIGNATURE
                    break


def _declarations(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise TranslationRefused("`tools` must be a list.", param="tools")
    out = []
    for index, tool in enumerate(tools):
        function = obj(obj(tool).get("function"))
        if obj(tool).get("type") != "function" or not string(function.get("name")):
            raise TranslationRefused(
                "Only named function tools can be given to this model.", param=f"tools[{index}]"
            )
        declaration: dict[str, Any] = {"name": function["name"]}
        if string(function.get("description")):
            declaration["description"] = function["description"]
        if obj(function.get("parameters")):
            declaration["parametersJsonSchema"] = function["parameters"]
        out.append(declaration)
    return out


def _calling_config(choice: Any) -> dict[str, Any]:
    if choice in ("none", "auto", "required"):
        return {"mode": {"none": "NONE", "auto": "AUTO", "required": "ANY"}[choice]}
    name = string(obj(obj(choice).get("function")).get("name"))
    if obj(choice).get("type") == "function" and name:
        return {"mode": "ANY", "allowedFunctionNames": [name]}
    raise TranslationRefused(
        "`tool_choice` is none, auto, required or a named function.", param="tool_choice"
    )


def _tokens_of(usage: Any) -> TranslatedTokens | None:
    if not isinstance(usage, dict):
        return None
    prompt = count(usage.get("promptTokenCount"))
    cached = min(count(usage.get("cachedContentTokenCount")), prompt)
    thoughts = count(usage.get("thoughtsTokenCount"))
    output = count(usage.get("candidatesTokenCount")) + thoughts
    return TranslatedTokens(input=prompt - cached, cached=cached, output=output, reasoning=thoughts)


def _finish(reason: Any, *, called: bool) -> str:
    if isinstance(reason, str) and reason in _FILTERED:
        return "content_filter"
    finish = _FINISH.get(reason if isinstance(reason, str) else "", "stop")
    return "tool_calls" if called and finish == "stop" else finish


class ChatViaGemini:
    """One `/v1/chat/completions` call on a Gemini upstream."""

    responses_answer: ResponsesAnswer | None = None  # a caller of another family

    def __init__(self, call: TranslatedCall) -> None:
        self.model = call.model
        self.created = call.created
        self._signed = _validates_signatures(call.upstream_model)
        self.tokens: TranslatedTokens | None = None
        self._usage_asked = False
        self._chunks = ChatChunks(
            chunk_id=f"chatcmpl-{secrets.token_hex(12)}", created=call.created, model=call.model
        )
        self._stopped = False
        self._calls = 0
        self._finish: str | None = None

    def request_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        for field, refused in (
            ("n", body.get("n") not in (None, 1)),
            ("logprobs", body.get("logprobs") not in (None, False)),
            ("audio", body.get("audio") is not None),
        ):
            if refused:
                raise TranslationRefused(f"`{field}` cannot be served by this model.", param=field)
        system, contents = _contents(body.get("messages"))
        if self._signed:
            _sign_calls(contents)
        out: dict[str, Any] = {"contents": contents}
        if system:
            out["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {}
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            config["maxOutputTokens"] = limit
        for name, key in (("temperature", "temperature"), ("top_p", "topP")):
            value = body.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                config[key] = value
        stop = body.get("stop")
        stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
        if [s for s in stops if isinstance(s, str) and s]:
            config["stopSequences"] = [s for s in stops if isinstance(s, str) and s]
        response_format = body.get("response_format")
        kind = obj(response_format).get("type")
        if kind in ("json_object", "json_schema"):
            config["responseMimeType"] = "application/json"
            schema = obj(obj(response_format).get("json_schema")).get("schema")
            if kind == "json_schema" and isinstance(schema, dict):
                config["responseJsonSchema"] = schema
        elif response_format is not None and kind != "text":
            raise TranslationRefused(
                "`response_format.type` is text, json_object or json_schema.", param="response_format"
            )
        effort = body.get("reasoning_effort")
        if isinstance(effort, str) and effort in _EFFORT_BUDGET:
            config["thinkingConfig"] = {"thinkingBudget": _EFFORT_BUDGET[effort], "includeThoughts": True}
        if config:
            out["generationConfig"] = config
        if body.get("tools") is not None:
            declarations = _declarations(body["tools"])
            if declarations:
                out["tools"] = [{"functionDeclarations": declarations}]
        if body.get("tool_choice") is not None:
            out["toolConfig"] = {"functionCallingConfig": _calling_config(body["tool_choice"])}
        options = body.get("stream_options")
        self._usage_asked = body.get("stream") is True and obj(options).get("include_usage") is True
        return out

    # A whole answer.

    def response_body(self, body: Any) -> dict[str, Any]:
        answer = obj(body)
        candidates = answer.get("candidates")
        candidate = obj(candidates[0]) if isinstance(candidates, list) and candidates else {}
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[dict[str, Any]] = []
        parts = obj(candidate.get("content")).get("parts")
        for part in parts if isinstance(parts, list) else ():
            text = string(obj(part).get("text"))
            call = obj(obj(part).get("functionCall"))
            if text is not None:
                (thoughts if obj(part).get("thought") is True else texts).append(text)
            elif call:
                calls.append(self._call(call))
        self.tokens = _tokens_of(answer.get("usageMetadata"))
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts) if texts or not calls else None,
        }
        if thoughts:
            message["reasoning_content"] = "".join(thoughts)
        if calls:
            message["tool_calls"] = calls
        response_id = string(answer.get("responseId"))
        return {
            "id": f"chatcmpl-{response_id}" if response_id else self._chunks.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": _finish(candidate.get("finishReason"), called=bool(calls)),
                    "logprobs": None,
                }
            ],
            "usage": chat_usage(self.tokens),
        }

    # A stream, one upstream event at a time.

    def stream_event(self, data: str) -> bytes:
        if self._stopped:
            return b""
        piece = event_object(data)
        if piece is None:
            return b""
        if obj(piece.get("error")):
            self._stopped = True
            message = string(obj(piece["error"]).get("message")) or "The upstream failed."
            return sse_data(
                {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
            )
        out = bytearray(self._chunks.start())
        self.tokens = _tokens_of(piece.get("usageMetadata")) or self.tokens
        candidates = piece.get("candidates")
        candidate = obj(candidates[0]) if isinstance(candidates, list) and candidates else {}
        parts = obj(candidate.get("content")).get("parts")
        for part in parts if isinstance(parts, list) else ():
            text = string(obj(part).get("text"))
            call = obj(obj(part).get("functionCall"))
            if text:
                field = "reasoning_content" if obj(part).get("thought") is True else "content"
                out += self._chunks.chunk({field: text})
            elif call:
                index = self._calls
                out += self._chunks.chunk({"tool_calls": [{"index": index, **self._call(call)}]})
        if string(candidate.get("finishReason")):
            self._finish = _finish(candidate["finishReason"], called=self._calls > 0)
        return bytes(out)

    def stream_end(self) -> bytes:
        if self._stopped:
            return b""
        self._stopped = True
        finish = self._finish or ("tool_calls" if self._calls else "stop")
        return self._chunks.end(finish=finish, usage=self.tokens, usage_asked=self._usage_asked)

    def error_body(self, status: int, body: bytes) -> bytes:
        error_type = "server_error" if status >= 500 else "invalid_request_error"
        error = {"message": error_message(status, body), "type": error_type, "param": None, "code": None}
        return json.dumps({"error": error}).encode()

    def _call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """A Gemini functionCall as a Chat Completions tool call (an id made when Gemini gave none)."""
        call_id = string(call.get("id")) or f"call_{secrets.token_hex(12)}"
        self._calls += 1
        arguments = json.dumps(obj(call.get("args")), ensure_ascii=False, separators=(",", ":"))
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": string(call.get("name")) or "", "arguments": arguments},
        }
