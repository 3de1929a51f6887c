"""A capture server for recording what real clients send: it listens on 127.0.0.1 only, keeps every
request (method, path, headers, JSON body) and answers a minimal valid answer in the family's shape,
JSON or an event stream as the request asks, so that the client goes on as it would with a provider.

With tools in the request and the last user text naming one of them (or `tool_choice` forcing one),
it answers a call of that tool, and in text otherwise: the clients' tool loops then send a tool
result, which is recorded too. Used by tests/clients/record.py; nothing here is imported by the gateway.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT = "It is sunny in Paris, 21 degrees."


def _last_user_text(body: dict) -> str:
    """The text of the last user turn, or "" when that turn is a tool result."""
    if "messages" in body:
        turns = body["messages"]
    else:
        turns = body.get("input") or []
        if isinstance(turns, str):
            return turns
    for turn in reversed(turns):
        if turn.get("type") == "function_call_output" or turn.get("role") == "tool":
            return ""
        if turn.get("role") != "user":
            continue
        content = turn.get("content")
        if isinstance(content, str):
            return content
        parts = [part for part in content or [] if isinstance(part, dict)]
        if any(part.get("type") in ("tool_result", "function_call_output") for part in parts):
            return ""
        # The prompt is the last text part; agent CLIs put their reminders before it.
        texts = [part.get("text", "") for part in parts if "text" in part]
        return texts[-1] if texts else ""
    return ""


def _tool_names(body: dict) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        names.append(tool.get("name") or (tool.get("function") or {}).get("name") or "")
    return [n for n in names if n]


def tool_to_call(body: dict) -> str | None:
    names = _tool_names(body)
    if not names:
        return None
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        forced = choice.get("name") or (choice.get("function") or {}).get("name")
        if forced in names:
            return forced
    text = _last_user_text(body)
    return next((n for n in names if re.search(rf"\b{re.escape(n)}\b", text)), None)


ARGS = {"city": "Paris"}
_SAMPLE = {"string": "ls", "array": ["ls"], "integer": 1, "number": 1, "boolean": False, "object": {}}


def tool_arguments(body: dict, name: str) -> dict:
    """The weather tool's city, or a value of its type for each required property of another tool."""
    if name == "get_weather":
        return ARGS
    for tool in body.get("tools") or []:
        if name in (tool.get("name"), (tool.get("function") or {}).get("name")):
            schema = (
                tool.get("input_schema")
                or tool.get("parameters")
                or (tool.get("function") or {}).get("parameters")
                or {}
            )
            props = schema.get("properties") or {}
            return {
                prop: _SAMPLE.get(str((props.get(prop) or {}).get("type")), "ls")
                for prop in schema.get("required") or []
            }
    return {}


def chat_answer(body: dict) -> tuple[dict, list[dict]]:
    """(completion, stream chunks) of one chat completion."""
    tool = tool_to_call(body)
    base = {"id": "chatcmpl-capture", "object": "chat.completion", "created": 1, "model": body.get("model")}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if tool:
        call = {
            "id": "call_capture1",
            "type": "function",
            "function": {"name": tool, "arguments": json.dumps(tool_arguments(body, tool))},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
        delta = {"role": "assistant", "tool_calls": [{"index": 0, **call}]}
    else:
        message = {"role": "assistant", "content": TEXT}
        finish = "stop"
        delta = {"role": "assistant", "content": TEXT}
    completion = {
        **base,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }
    chunk = {**base, "object": "chat.completion.chunk"}
    chunks = [
        {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**chunk, "choices": [], "usage": usage},
    ]
    return completion, chunks


def responses_answer(body: dict) -> tuple[dict, list[dict]]:
    """(response, stream events) of one Responses call."""
    tool = tool_to_call(body)
    if tool:
        item = {
            "type": "function_call",
            "id": "fc_capture1",
            "call_id": "call_capture1",
            "name": tool,
            "arguments": json.dumps(tool_arguments(body, tool)),
            "status": "completed",
        }
    else:
        item = {
            "type": "message",
            "id": "msg_capture1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": TEXT, "annotations": []}],
        }
    response = {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": body.get("model"),
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        },
    }
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [
        {"type": "response.created", "sequence_number": 0, "response": started},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": item},
        {"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": item},
        {"type": "response.completed", "sequence_number": 3, "response": response},
    ]
    if not tool:
        events[2:2] = [
            {
                "type": "response.output_text.delta",
                "sequence_number": 2,
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": TEXT,
                "logprobs": [],
            }
        ]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return response, events


def messages_answer(body: dict) -> tuple[dict, list[dict]]:
    """(message, stream events) of one Messages call."""
    tool = tool_to_call(body)
    if tool:
        block = {
            "type": "tool_use",
            "id": "toolu_capture1",
            "name": tool,
            "input": tool_arguments(body, tool),
        }
        start_block = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": TEXT}
        start_block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": TEXT}
        stop = "end_turn"
    usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    message = {
        "id": "msg_capture1",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [block],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    events = [
        {
            "type": "message_start",
            "message": {
                **message,
                "content": [],
                "stop_reason": None,
                "usage": {**usage, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": start_block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    return message, events


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CaptureServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send_json(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _send_events(self, events: list[tuple[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            self.wfile.write(((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode())
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        self.server.record("GET", self.path, dict(self.headers), None)
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [], "models": []})
        else:
            self._send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.headers.get("Content-Encoding") == "zstd":
            self._send_json(415, {"error": {"message": "compressed bodies are not captured"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, {"error": {"message": "not JSON"}})
            return
        path = self.path.split("?")[0]
        self.server.record("POST", path, dict(self.headers), body)
        stream = body.get("stream") is True
        if path.endswith("/messages/count_tokens"):
            self._send_json(200, {"input_tokens": 10})
        elif path.endswith("/messages"):
            message, events = messages_answer(body)
            self._send_events([(e["type"], e) for e in events]) if stream else self._send_json(200, message)
        elif path.endswith("/responses"):
            response, events = responses_answer(body)
            self._send_events([(e["type"], e) for e in events]) if stream else self._send_json(200, response)
        elif path.endswith("/chat/completions"):
            completion, chunks = chat_answer(body)
            if stream:
                self._send_events([("", c) for c in chunks] + [("", "[DONE]")])
            else:
                self._send_json(200, completion)
        else:
            self._send_json(404, {"error": {"message": f"no such path {path}"}})


class CaptureServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, method: str, path: str, headers: dict, body: Any) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})

    def take(self) -> list[dict]:
        with self._lock:
            taken, self.requests = self.requests, []
        return taken

    def __enter__(self) -> CaptureServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
