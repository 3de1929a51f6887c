"""A fake OpenAI-compatible and Anthropic upstream, run as its own process on 127.0.0.1.

Used by fault tests (scripted per test), by the text end-to-end tests and by the benchmarks (fixed
latency). Run:

    python -m tests.fake_upstream --port 0 [--latency 0.5] [--image-bytes 4000000]

It prints `listening on PORT` once ready. Endpoints:
- POST /v1/images/generations, /v1/images/edits: the next scripted answer for that path, else a
  success with one small PNG per requested image (`n`), b64_json or url as asked.
- POST /v1/chat/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens: the next
  scripted answer for that path, else a success in the provider's wire format, streamed when the
  body says `"stream": true`; tests/fake_text_upstream.py says what the answers hold and the scripted
  answers only these paths take (family-shaped errors, delays between events, cut streams).
- POST /_script {"path": "/v1/images/generations", "answers": [answer, ...]}: queue answers. An answer
  is {"status": 500, "json": {...}} or {"status": 200, "body": "<html>", "content_type": "text/html"}
  (`"gzip": true` sends the body gzip-encoded), with optional "delay" (seconds before answering),
  "headers", or {"action": "drop"} (close the connection without answering) / {"action": "hang"}
  (never answer within the client's timeout).
- GET /_requests: every API request received so far ({"path", "headers", "json" or "form_fields",
  "received_at": the fake upstream's time.monotonic() when the request was read}). A streamed text
  answer adds "stream": {"events": how many it had, "sent": how many went out, "ended": "complete",
  "cut" or "disconnected" (the client closed the connection first), "at": time.monotonic() then};
  between two events of a dripping stream a closed connection is seen at once, not at the next write.
- POST /_reset: clear scripts and the request log.
- GET /files/<name>.png: the fixed PNG (for url results).
- GET /redirect?to=<percent-encoded URL>: 302 to that URL, whatever it holds.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import select
import socket
import struct
import sys
import threading
import time
import zlib
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from tests.fake_text_upstream import TEXT_PATHS, TextAnswer, error_body


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(size: int = 8, pad_to: int = 0) -> bytes:
    """A small valid PNG built without Pillow (the bench process stays light), padded with a text
    chunk to about `pad_to` bytes when asked, so large answers stay decodable images."""
    raw = b"".join(b"\x00" + b"\x10\x80\xf0" * size for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    body = _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw))
    filler = max(0, pad_to - len(body) - 8 - 12 - 12)
    if filler:
        body += _chunk(b"tEXt", b"pad\x00" + b"x" * filler)
    return b"\x89PNG\r\n\x1a\n" + body + _chunk(b"IEND", b"")


class State:
    def __init__(self, latency: float, image: bytes) -> None:
        self.latency = latency
        self.image = image
        self.image_b64 = base64.b64encode(image).decode()
        self.lock = threading.Lock()
        self.scripts: dict[str, deque] = defaultdict(deque)
        self.requests: list[dict[str, Any]] = []
        self.answered = 0  # numbers the text answers' ids


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK add ~40 ms to every answer on a kept-alive connection.
    disable_nagle_algorithm = True
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read /_requests instead
        return

    def _send(self, status: int, body: bytes, content_type: str = "application/json", headers=None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, payload: Any, headers=None) -> None:
        self._send(status, json.dumps(payload).encode(), headers=headers)

    def _scripted_body(self, answer: dict[str, Any]) -> None:
        body, headers = answer["body"].encode(), answer.get("headers") or {}
        if answer.get("gzip"):
            body, headers = gzip.compress(body), {**headers, "Content-Encoding": "gzip"}
        self._send(answer.get("status", 200), body, answer.get("content_type", "text/html"), headers=headers)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        state = self.server.state
        if self.path == "/_requests":
            with state.lock:
                self._json(200, state.requests)
            return
        if self.path.startswith("/files/"):
            self._send(200, state.image, "image/png")
            return
        if self.path.startswith("/redirect?to="):
            location = unquote(self.path.split("=", 1)[1])
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        state = self.server.state
        raw = self._body()
        if self.path == "/_script":
            spec = json.loads(raw)
            with state.lock:
                state.scripts[spec["path"]].extend(spec["answers"])
            self._json(200, {"ok": True})
            return
        if self.path == "/_reset":
            with state.lock:
                state.scripts.clear()
                state.requests.clear()
            self._json(200, {"ok": True})
            return
        record: dict[str, Any] = {
            "path": self.path,
            "client_port": self.client_address[1],  # which of the caller's connections it came on
            "headers": dict(self.headers.items()),
            "received_at": time.monotonic(),
        }
        content_type = self.headers.get("Content-Type", "")
        payload: dict[str, Any] = {}
        if content_type.startswith("application/json"):
            payload = json.loads(raw or b"{}")
            record["json"] = payload
        elif content_type.startswith("multipart/form-data"):
            record["form_fields"] = _multipart_field_names(raw, content_type)
            payload = record["form_fields"].get("_values", {})
        self.record = record
        with state.lock:
            state.requests.append(record)
            answer = state.scripts[self.path].popleft() if state.scripts[self.path] else None
        if answer is None:
            if state.latency:
                time.sleep(state.latency)
            self._success(payload)
            return
        if answer.get("delay"):
            time.sleep(answer["delay"])
        action = answer.get("action")
        if action == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if action == "hang":
            time.sleep(answer.get("seconds", 30))
            return
        if self.path in TEXT_PATHS:
            self._text_scripted(payload, answer)
            return
        if action == "cut_stream":
            # Start an event stream, send some partial images, then drop the connection.
            self._stream(payload, partials=answer.get("partials", 1), complete=False)
            return
        if "json" in answer:
            self._json(answer.get("status", 200), answer["json"], headers=answer.get("headers"))
        elif "body" in answer:
            self._scripted_body(answer)
        else:
            self._success(payload)

    def _stream(self, payload: dict[str, Any], *, partials: int, complete: bool = True) -> None:
        prefix = "image_edit" if self.path.endswith("/edits") else "image_generation"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()  # no Content-Length: the body ends when the connection closes
        self.close_connection = True
        image = self.server.state.image_b64
        for index in range(partials):
            event = {"type": f"{prefix}.partial_image", "b64_json": image, "partial_image_index": index}
            self.wfile.write(f"event: {prefix}.partial_image\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.05)
        if not complete:
            self.connection.shutdown(2)
            return
        done = {"type": f"{prefix}.completed", "b64_json": image, "usage": {"total_tokens": 10}}
        self.wfile.write(f"event: {prefix}.completed\ndata: {json.dumps(done)}\n\n".encode())
        self.wfile.flush()

    def _success(self, payload: dict[str, Any]) -> None:
        state = self.server.state
        if self.path in TEXT_PATHS:
            self._text(payload, {})
            return
        if str(payload.get("stream")).lower() == "true":
            self._stream(payload, partials=int(payload.get("partial_images") or 0))
            return
        n = int(payload.get("n") or 1)
        host = self.headers.get("Host", "127.0.0.1")
        if payload.get("response_format") == "url":
            items = [{"url": f"http://{host}/files/{i}.png"} for i in range(n)]
        else:
            items = [
                {"b64_json": state.image_b64, "revised_prompt": payload.get("prompt", "")} for _ in range(n)
            ]
        self._json(200, {"created": int(time.time()), "data": items})

    def _text_scripted(self, payload: dict[str, Any], answer: dict[str, Any]) -> None:
        """A scripted answer on a text path (its delay already waited)."""
        action = answer.get("action")
        if "error" in answer:
            body = error_body(self.path, answer["status"], answer["error"], answer.get("error_type"))
            self._json(answer["status"], body, headers=answer.get("headers"))
        elif "json" in answer:
            self._json(answer.get("status", 200), answer["json"], headers=answer.get("headers"))
        elif "body" in answer:
            self._scripted_body(answer)
        elif action in ("cut_stream", "stream_error"):
            self._text(
                payload, answer, stop_after=int(answer.get("after", 2)), error=action == "stream_error"
            )
        else:
            self._text(payload, answer)

    def _text(
        self,
        payload: dict[str, Any],
        answer: dict[str, Any],
        *,
        stop_after: int | None = None,
        error: bool = False,
    ) -> None:
        state = self.server.state
        with state.lock:
            state.answered += 1
            number = state.answered
        text = TextAnswer(self.path, payload, self.headers, answer, number)
        if not text.streamed:
            if stop_after is not None and not error:  # a cut body: nothing comes back
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self._json(200, text.body())
            return
        events = text.events()
        if stop_after is not None:
            events = events[: min(stop_after, len(events) - 1)]  # the final event never goes out
            if error:
                events.append(text.error_event(sequence_number=len(events)))
        chunked = answer.get("framing", "chunked") == "chunked"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True  # the body ends when the connection closes
        self.end_headers()
        delay = float(answer.get("event_delay") or 0)
        keep_alive = b": keep-alive\n\n" if answer.get("keep_alive") else b""
        sent = 0
        try:
            for index, event in enumerate(events):
                if delay and index and self._client_gone(delay):
                    raise ConnectionResetError
                for piece in (keep_alive, event) if keep_alive else (event,):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                    self.wfile.flush()
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            self._stream_ended(events=len(text.events()), sent=sent, ended="disconnected")
            self.close_connection = True
            return
        if stop_after is not None and not error:
            # Cut: the connection drops without the chunked body's last chunk.
            self._stream_ended(events=len(text.events()), sent=sent, ended="cut")
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        self._stream_ended(events=len(text.events()), sent=sent, ended="complete")

    def _client_gone(self, seconds: float) -> bool:
        """Wait `seconds` before the next event; True as soon as the client closes the connection
        (it sends nothing else while it reads a stream, so its connection turning readable is its end)."""
        readable, _, _ = select.select([self.connection], [], [], seconds)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _stream_ended(self, **outcome: Any) -> None:
        with self.server.state.lock:
            self.record["stream"] = {**outcome, "at": time.monotonic()}


def _multipart_field_names(raw: bytes, content_type: str) -> dict[str, Any]:
    """Names of the parts of a multipart body, and the values of its text fields."""
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    names: dict[str, Any] = {"_values": {}}
    for part in raw.split(b"--" + boundary):
        head, _, value = part.partition(b"\r\n\r\n")
        if b'name="' not in head:
            continue
        name = head.split(b'name="', 1)[1].split(b'"', 1)[0].decode()
        is_file = b"filename=" in head
        names[name] = names.get(name, 0) + 1
        if not is_file:
            names["_values"][name] = value.rstrip(b"\r\n").decode(errors="replace")
    return names


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], state: State) -> None:
        super().__init__(address, Handler)
        self.state = state

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that give up (timeouts, dropped connections) are part of the tests, not errors.
        return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each default answer")
    parser.add_argument("--image-bytes", type=int, default=0, help="pad the PNG to about this many bytes")
    args = parser.parse_args(argv)
    image = _png(pad_to=args.image_bytes)
    server = Server(("127.0.0.1", args.port), State(args.latency, image))
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
