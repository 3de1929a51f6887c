"""An image given by link to a model on a `gemini` upstream: the gateway downloads it under the
request-forgery rules (upstreams/ssrf.py) from a real HTTP server on this machine, and Gemini (behind
`responses`) receives its bytes as `inlineData` under the media type the bytes show; from every
caller family, streamed and not. Whatever breaks a rule (a private address, a redirect to one, too
large, not an image Gemini reads, too many links, too slow) is a 400 in the caller's family's shape
naming the field, with nothing reserved or charged and a usage record like the other 400s. The
loopback server is reached only because these tests list 127.0.0.1 in
GATEWAY_FETCH_PRIVATE_NETWORKS (empty by default); the refusals of private addresses run without it."""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import random
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.cache import cache
from PIL import Image

from billing.limits import KEY_RATE_GROUP
from billing.models import Hold, UsageRecord, Wallet
from billing.selectors import ledger_check
from core.overload import REMEMBERED_SECONDS, start_delay, worker_lag
from keys.services import ApiKeyLimitsInput, api_key_create
from tests.chat.conftest import KEY_ENV, OPENAI_BASE, PROVIDER_KEY, sse_body
from tests.factories import text_model_make, upstream_make
from tests.rate_windows import rate_window_wait

pytestmark = pytest.mark.django_db

GEMINI_BASE = "https://generativelanguage.test/v1beta"
GENERATE = f"{GEMINI_BASE}/models/gemini-2.5-flash:generateContent"
STREAM = f"{GEMINI_BASE}/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
COUNT = f"{GEMINI_BASE}/models/gemini-2.5-flash:countTokens"
USAGE = {"promptTokenCount": 300, "candidatesTokenCount": 10}
# 300 input at 2.00 and 10 output at 8.00, per million tokens.
COST = (300 * Decimal("2.00") + 10 * Decimal("8.00")) / Decimal(1_000_000)
ANSWER = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "A red square"}]}, "finishReason": "STOP"}
    ],
    "usageMetadata": USAGE,
}
LOOPBACK = (ipaddress.ip_network("127.0.0.1/32"),)


def picture(fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (24, 16), (200, 30, 30)).save(buffer, fmt)
    return buffer.getvalue()


# An HEIC file's first box (`ftyp`, major brand heic): what tells its type; Gemini decodes the rest.
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64


class ImageServer:
    """A real HTTP server on a loopback address: each path answers (status, headers, body, delay);
    `received` lists the paths asked, in order, and `headers` their requests' headers."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes, float]] = {}
        self.received: list[str] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.received.append(self.path)
                server.headers.append({name.lower(): value for name, value in self.headers.items()})
                status, headers, body, delay = server.routes.get(self.path, (404, {}, b"", 0.0))
                time.sleep(delay)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def serve(
        self,
        path: str,
        body: bytes,
        content_type: str = "image/png",
        *,
        length: bool = True,
        delay: float = 0.0,
    ) -> str:
        """Answer `path` with `body`, after `delay` seconds."""
        headers = {"Content-Type": content_type, **({"Content-Length": str(len(body))} if length else {})}
        self.routes[path] = (200, headers, body, delay)
        return self.base_url + path

    def redirect(self, path: str, location: str) -> str:
        self.routes[path] = (302, {"Location": location, "Content-Length": "0"}, b"", 0.0)
        return self.base_url + path

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def images(upstream):
    """The image server; requests to it pass the `responses` boundary, which fakes only the providers."""
    server = ImageServer()
    upstream.add_passthru(server.base_url)
    yield server
    server.close()


@pytest.fixture
def loopback_allowed(settings):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = LOOPBACK


@pytest.fixture
def gemini_model(chat_group, monkeypatch):
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    gemini = upstream_make(name="gemini", base_url=GEMINI_BASE, api_key_env=KEY_ENV, kind="gemini")
    return text_model_make(
        model_id="alpha-gemini",
        group=chat_group,
        upstreams=[gemini],
        upstream_model="gemini-2.5-flash",
        max_output_tokens=1000,
    )


def post(client, path, body, key):
    return client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def chat_body(link: str) -> dict:
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": link}}]
    return {"messages": [{"role": "user", "content": parts}]}


def responses_body(link: str) -> dict:
    parts = [{"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": link}]
    return {"input": [{"role": "user", "content": parts}]}


def messages_body(link: str) -> dict:
    blocks = [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "url", "url": link}},
    ]
    return {"max_tokens": 100, "messages": [{"role": "user", "content": blocks}]}


# (path, body with the link, the link's field, the answer's text)
FAMILIES = {
    "chat": (
        "/v1/chat/completions",
        chat_body,
        "messages[0].content[1].image_url.url",
        lambda b: b["choices"][0]["message"]["content"],
    ),
    "responses": (
        "/v1/responses",
        responses_body,
        "input[0].content[1].image_url",
        lambda b: b["output"][0]["content"][0]["text"],
    ),
    "messages": (
        "/v1/messages",
        messages_body,
        "messages[0].content[1].source.url",
        lambda b: b["content"][0]["text"],
    ),
}


def inline_parts(call) -> list[dict]:
    sent = json.loads(call.request.body)
    return [
        part["inlineData"]
        for content in sent["contents"]
        for part in content["parts"]
        if "inlineData" in part
    ]


def error_of(path: str, response) -> dict:
    body = response.json()
    if path == "/v1/messages":
        assert body["type"] == "error"
    return body["error"]


def assert_refused_free(response, *, path: str, param: str, reason: str, tara, before: Decimal) -> None:
    """A 400 in the family's shape naming the field; no hold, no charge, a usage record of the 400."""
    assert response.status_code == 400, response.content
    error = error_of(path, response)
    assert error["type"] == "invalid_request_error"
    if path == "/v1/messages":
        assert error["message"].startswith(f"invalid_image_url: {param}: the image could not be used: ")
    else:
        assert (error["param"], error["code"]) == (param, "invalid_image_url")
        assert error["message"].startswith(f"{param}: the image could not be used: ")
    assert reason in error["message"]
    assert balance(tara) == before
    assert not Hold.objects.exists()
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.amount) == (400, "invalid_image_url", 0)
    assert ledger_check() == []


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_image_link_reaches_gemini_as_its_bytes_and_the_call_is_charged_exactly(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, family, stream
):
    path, body_of, _, text_of = FAMILIES[family]
    png = picture("PNG")
    link = images.serve("/photos/square.png", png)
    if stream:
        upstream.post(
            STREAM,
            body=sse_body(
                ("", {"candidates": [{"content": {"role": "model", "parts": [{"text": "A red"}]}}]}),
                (
                    "",
                    {
                        **ANSWER,
                        "candidates": [
                            {
                                **ANSWER["candidates"][0],
                                "content": {"role": "model", "parts": [{"text": " square"}]},
                            }
                        ],
                    },
                ),
            ),
            content_type="text/event-stream",
        )
    else:
        upstream.post(GENERATE, json=ANSWER)
    before = balance(tara)

    response = post(client, path, {"model": "alpha-gemini", "stream": stream, **body_of(link)}, tara_key)

    assert response.status_code == 200, response.content if not stream else ""
    if stream:
        text = b"".join(response.streaming_content).decode()
        assert "A red" in text and " square" in text
    else:
        assert text_of(response.json()) == "A red square"
    assert images.received == ["/photos/square.png"]
    sent_headers = images.headers[0]
    assert "authorization" not in sent_headers and "x-goog-api-key" not in sent_headers
    assert sent_headers["user-agent"].startswith("image-gateway/") and "cookie" not in sent_headers
    gemini_call = next(call for call in upstream.calls if call.request.url.startswith(GEMINI_BASE))
    assert inline_parts(gemini_call) == [{"mimeType": "image/png", "data": base64.b64encode(png).decode()}]
    sent = json.loads(gemini_call.request.body)
    assert sent["contents"][0]["parts"][0] == {"text": "What is this?"}
    assert balance(tara) == before - COST
    record = UsageRecord.objects.get()
    assert (record.status, record.amount, record.input_tokens, record.output_tokens) == (200, COST, 300, 10)
    assert not Hold.objects.filter(status="open").exists()
    assert ledger_check() == []


@pytest.mark.parametrize(
    ("fmt", "declared", "media_type"),
    [
        ("JPEG", "image/jpeg", "image/jpeg"),
        ("WEBP", "image/webp", "image/webp"),
        ("HEIC", "image/heic", "image/heic"),
        # The bytes tell the type when the server names another image type.
        ("JPEG", "image/png", "image/jpeg"),
    ],
)
def test_the_media_type_sent_is_the_one_the_bytes_show(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, fmt, declared, media_type
):
    data = HEIC if fmt == "HEIC" else picture(fmt)
    link = images.serve("/photo", data, f"{declared}; charset=binary")
    upstream.post(GENERATE, json=ANSWER)

    response = post(client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(link)}, tara_key)

    assert response.status_code == 200, response.content
    assert inline_parts(upstream.calls[-1]) == [
        {"mimeType": media_type, "data": base64.b64encode(data).decode()}
    ]


def test_a_link_given_twice_is_downloaded_once_and_a_redirect_on_a_public_host_is_followed(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key
):
    png = picture("PNG")
    images.serve("/real.png", png)
    link = images.redirect("/moved.png", "/real.png")
    upstream.post(GENERATE, json=ANSWER)
    body = {
        "model": "alpha-gemini",
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": link}}]},
            {"role": "assistant", "content": "A square."},
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": link}, {"type": "text", "text": "Again?"}],
            },
        ],
    }

    response = post(client, "/v1/chat/completions", body, tara_key)

    assert response.status_code == 200, response.content
    assert images.received == ["/moved.png", "/real.png"]
    encoded = base64.b64encode(png).decode()
    assert inline_parts(upstream.calls[-1]) == [{"mimeType": "image/png", "data": encoded}] * 2


def test_count_tokens_for_a_gemini_model_counts_a_linked_image_by_its_bytes(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key
):
    png = picture("PNG")
    link = images.serve("/a.png", png)
    upstream.post(COUNT, json={"totalTokens": 270})

    response = post(
        client, "/v1/messages/count_tokens", {"model": "alpha-gemini", **messages_body(link)}, tara_key
    )

    assert response.status_code == 200, response.content
    assert response.json() == {"input_tokens": 270}
    sent = json.loads(upstream.calls[-1].request.body)["generateContentRequest"]
    assert sent["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": base64.b64encode(png).decode()}
    }


def test_count_tokens_over_the_keys_rpm_is_refused_before_its_links_are_downloaded(
    client, upstream, images, loopback_allowed, gemini_model, tara
):
    cache.clear()  # key ids repeat from test to test: no earlier test's count may remain
    api_key, key = api_key_create(
        account=tara, group=gemini_model.group, label="counter", limits=ApiKeyLimitsInput(rpm=1)
    )
    rate_window_wait(f"api_key:{api_key.pk}", group=KEY_RATE_GROUP)
    link = images.serve("/a.png", picture("PNG"))
    upstream.post(COUNT, json={"totalTokens": 270})
    body = {"model": "alpha-gemini", **messages_body(link)}

    first = post(client, "/v1/messages/count_tokens", body, key)
    second = post(client, "/v1/messages/count_tokens", body, key)

    assert first.status_code == 200, first.content
    assert second.status_code == 429, second.content
    assert second.json()["error"]["type"] == "rate_limit_error"
    assert images.received == ["/a.png"]
    assert len([call for call in upstream.calls if call.request.url == COUNT]) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_billed_call_over_the_keys_rpm_is_refused_before_its_links_are_downloaded(
    client, upstream, images, loopback_allowed, gemini_model, tara, stream
):
    cache.clear()  # key ids repeat from test to test: no earlier test's count may remain
    api_key, key = api_key_create(
        account=tara, group=gemini_model.group, label="agent", limits=ApiKeyLimitsInput(rpm=1)
    )
    rate_window_wait(f"api_key:{api_key.pk}", group=KEY_RATE_GROUP)
    link = images.serve("/a.png", picture("PNG"))
    if stream:
        upstream.post(STREAM, body=sse_body(("", ANSWER)), content_type="text/event-stream")
    else:
        upstream.post(GENERATE, json=ANSWER)
    body = {"model": "alpha-gemini", "stream": stream, **chat_body(link)}
    before = balance(tara)

    first = post(client, "/v1/chat/completions", body, key)
    if stream:
        b"".join(first.streaming_content)
    second = post(client, "/v1/chat/completions", body, key)

    assert first.status_code == 200
    assert second.status_code == 429, second.content
    assert second.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(second["Retry-After"]) <= 60
    assert images.received == ["/a.png"]
    assert len([call for call in upstream.calls if call.request.url.startswith(GEMINI_BASE)]) == 1
    assert UsageRecord.objects.filter(status=200).count() == 1
    assert Hold.objects.count() == 1  # the first call's, captured
    assert balance(tara) == before - COST
    assert ledger_check() == []


def test_the_check_before_the_downloads_counts_nothing_against_the_rpm(
    client, upstream, images, loopback_allowed, gemini_model, tara
):
    cache.clear()
    api_key, key = api_key_create(
        account=tara, group=gemini_model.group, label="agent", limits=ApiKeyLimitsInput(rpm=2)
    )
    rate_window_wait(f"api_key:{api_key.pk}", group=KEY_RATE_GROUP)
    link = images.serve("/a.png", picture("PNG"))
    upstream.post(GENERATE, json=ANSWER)
    body = {"model": "alpha-gemini", **chat_body(link)}

    answers = [post(client, "/v1/chat/completions", body, key) for _ in range(3)]

    assert [answer.status_code for answer in answers] == [200, 200, 429]
    assert images.received == ["/a.png", "/a.png"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_whose_output_limit_the_balance_cannot_cover_downloads_nothing(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, stream
):
    # The hold covers at least the output limit: 1,000 tokens at 8.00 per million.
    Wallet.objects.filter(account=tara).update(balance=Decimal("0.005"))
    link = images.serve("/a.png", picture("PNG"))

    response = post(
        client,
        "/v1/chat/completions",
        {"model": "alpha-gemini", "stream": stream, **chat_body(link)},
        tara_key,
    )

    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "INSUFFICIENT_BALANCE"
    assert images.received == []
    assert not Hold.objects.exists()
    assert balance(tara) == Decimal("0.005")
    assert not upstream.calls


@pytest.mark.parametrize(("budget", "status"), [("0.004", 429), ("1.00", 200)])
def test_a_key_whose_budget_cannot_cover_the_output_limit_downloads_nothing(
    client, upstream, images, loopback_allowed, gemini_model, tara, budget, status
):
    # The hold covers at least the output limit: 1,000 tokens at 8.00 per million, 0.008.
    key = api_key_create(
        account=tara,
        group=gemini_model.group,
        label="budgeted",
        limits=ApiKeyLimitsInput(budget=Decimal(budget), budget_period="daily"),
    )[1]
    link = images.serve("/a.png", picture("PNG"))
    upstream.post(GENERATE, json=ANSWER)
    before = balance(tara)

    response = post(client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(link)}, key)

    assert response.status_code == status, response.content
    if status == 429:
        assert response.json()["error"]["code"] == "USAGE_LIMIT_EXCEEDED"
        assert "daily budget" in response.json()["error"]["message"]
        assert images.received == []
        assert not Hold.objects.exists()
        assert balance(tara) == before
    else:
        assert images.received == ["/a.png"]
        assert balance(tara) == before - COST
    assert ledger_check() == []


def test_a_key_whose_tpm_window_has_no_room_for_the_output_limit_downloads_nothing(
    client, upstream, images, loopback_allowed, gemini_model, tara
):
    cache.clear()  # key ids repeat from test to test: no earlier test's window may remain
    key = api_key_create(
        account=tara, group=gemini_model.group, label="agent", limits=ApiKeyLimitsInput(tpm=900)
    )[1]
    link = images.serve("/a.png", picture("PNG"))
    before = balance(tara)

    response = post(client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(link)}, key)

    assert response.status_code == 429, response.content
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert "may use up to 1000 tokens" in response.json()["error"]["message"]  # its output limit
    assert images.received == []
    assert not Hold.objects.exists()
    assert balance(tara) == before
    assert not upstream.calls


# --- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(
    "where",
    [
        "{base}/a.png",
        "http://localhost:{port}/a.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.7/a.png",
        "http://[::1]:{port}/a.png",
    ],
)
def test_a_link_to_a_private_address_is_refused_before_anything_is_reserved(
    client, upstream, images, gemini_model, tara, tara_key, family, where
):
    """Without the operator's allowance, loopback, link-local and private addresses are never asked."""
    path, body_of, param, _ = FAMILIES[family]
    images.serve("/a.png", picture("PNG"))
    link = where.format(base=images.base_url, port=images.httpd.server_address[1])
    before = balance(tara)

    response = post(client, path, {"model": "alpha-gemini", **body_of(link)}, tara_key)

    assert_refused_free(
        response, path=path, param=param, reason="non-public address", tara=tara, before=before
    )
    assert images.received == []
    assert not upstream.calls


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_redirect_to_a_private_address_is_refused(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, stream
):
    """127.0.0.1 is allowed here; the redirect goes to another loopback address, which is not."""
    inner = ImageServer(host="127.0.0.2")
    try:
        inner.serve("/secret.png", picture("PNG"))
        link = images.redirect("/go", f"{inner.base_url}/secret.png")
        before = balance(tara)

        response = post(
            client,
            "/v1/chat/completions",
            {"model": "alpha-gemini", "stream": stream, **chat_body(link)},
            tara_key,
        )

        assert_refused_free(
            response,
            path="/v1/chat/completions",
            param="messages[0].content[1].image_url.url",
            reason="non-public address",
            tara=tara,
            before=before,
        )
        assert images.received == ["/go"]
        assert inner.received == []
        assert not [call for call in upstream.calls if call.request.url.startswith(GEMINI_BASE)]
    finally:
        inner.close()


@pytest.mark.parametrize("declared_length", [True, False], ids=["content-length", "unannounced"])
def test_an_image_over_the_size_cap_is_refused(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, settings, declared_length
):
    settings.GATEWAY_FETCH_MAX_BYTES = 1024
    link = images.serve("/big.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 4096, length=declared_length)
    before = balance(tara)

    response = post(client, "/v1/responses", {"model": "alpha-gemini", **responses_body(link)}, tara_key)

    assert_refused_free(
        response,
        path="/v1/responses",
        param="input[0].content[1].image_url",
        reason="larger than 1024 bytes",
        tara=tara,
        before=before,
    )


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        (b"<html>sign in</html>", "text/html", "the server answered text/html, not one of image/heic"),
        (picture("GIF"), "image/gif", "the server answered image/gif"),
        (b"<html>sign in</html>", "image/png", "not a PNG, JPEG, WebP, HEIC or HEIF image"),
        (picture("GIF"), "image/png", "not a PNG, JPEG, WebP, HEIC or HEIF image"),
        (b"", "", "no Content-Type"),
    ],
    ids=["html", "gif", "html-called-png", "gif-called-png", "untyped"],
)
def test_what_is_not_an_image_gemini_reads_is_refused(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, body, content_type, reason
):
    link = images.serve("/file", body, content_type)
    if not content_type:
        images.routes["/file"] = (200, {"Content-Length": "0"}, b"", 0.0)
    before = balance(tara)

    response = post(client, "/v1/messages", {"model": "alpha-gemini", **messages_body(link)}, tara_key)

    assert_refused_free(
        response,
        path="/v1/messages",
        param="messages[0].content[1].source.url",
        reason=reason,
        tara=tara,
        before=before,
    )
    assert not upstream.calls


@pytest.mark.parametrize(
    ("status", "reason"), [(404, "the server answered HTTP 404"), (403, "the server answered HTTP 403")]
)
def test_a_link_that_answers_an_error_is_refused(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, status, reason
):
    images.routes["/gone.png"] = (status, {"Content-Length": "0"}, b"", 0.0)
    before = balance(tara)

    response = post(
        client,
        "/v1/chat/completions",
        {"model": "alpha-gemini", **chat_body(images.base_url + "/gone.png")},
        tara_key,
    )

    assert_refused_free(
        response,
        path="/v1/chat/completions",
        param="messages[0].content[1].image_url.url",
        reason=reason,
        tara=tara,
        before=before,
    )


def test_a_download_slower_than_the_time_limit_is_refused(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, settings
):
    settings.GATEWAY_FETCH_TIMEOUT_SECONDS = 1
    png = picture("PNG")
    slow_link = images.serve("/slow.png", png, delay=2.5)
    before = balance(tara)

    started = time.monotonic()
    response = post(
        client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(slow_link)}, tara_key
    )

    assert time.monotonic() - started < 2.5
    assert_refused_free(
        response,
        path="/v1/chat/completions",
        param="messages[0].content[1].image_url.url",
        reason="took too long",
        tara=tara,
        before=before,
    )


def test_a_slow_image_server_does_not_make_the_worker_shed_the_next_call(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, settings
):
    """Shedding counts how long this process takes to start its calls (core/overload.py); how long
    the server the caller named takes to send the image is that server's, not the process's."""
    settings.GATEWAY_SHED_LAG_SECONDS = 0.5
    png = picture("PNG")
    fast = images.serve("/a.png", png)
    slow_link = images.serve("/slow.png", png, delay=1.0)
    upstream.post(GENERATE, json=ANSWER)
    before = balance(tara)
    # A first call, whose start is slower for what the process loads and caches on the way ...
    first = post(client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(fast)}, tara_key)
    assert first.status_code == 200, first.content
    worker_lag()
    time.sleep(2 * REMEMBERED_SECONDS + 0.1)  # ... and what it and earlier tests' calls noted, lapsed

    started = time.monotonic()
    slow = post(client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(slow_link)}, tara_key)

    assert slow.status_code == 200, slow.content
    assert time.monotonic() - started >= 1.0
    assert start_delay() < 0.5
    following = post(client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(fast)}, tara_key)

    assert following.status_code == 200, following.content
    assert balance(tara) == before - 3 * COST
    assert UsageRecord.objects.filter(status=200).count() == 3
    assert ledger_check() == []


def test_more_distinct_links_than_the_bound_are_refused_naming_the_first_beyond_it(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key
):
    links = [images.serve(f"/{index}.png", picture("PNG")) for index in range(17)]
    parts = [{"type": "image_url", "image_url": {"url": link}} for link in links]
    parts.insert(3, {"type": "image_url", "image_url": {"url": links[0]}})  # a repeat counts once
    before = balance(tara)

    response = post(
        client,
        "/v1/chat/completions",
        {"model": "alpha-gemini", "messages": [{"role": "user", "content": parts}]},
        tara_key,
    )

    assert_refused_free(
        response,
        path="/v1/chat/completions",
        param="messages[0].content[17].image_url.url",
        reason="at most 16 images",
        tara=tara,
        before=before,
    )
    assert images.received == []


@pytest.mark.parametrize(
    "link",
    [
        "HTTP://127.0.0.1:{port}/a.png",
        "http://127.0.0.1:{port}\\@example.com/a.png",
        "http://user@127.0.0.1:{port}/a.png",
    ],
)
def test_a_link_not_in_canonical_form_is_refused(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, link
):
    images.serve("/a.png", picture("PNG"))
    before = balance(tara)

    response = post(
        client,
        "/v1/chat/completions",
        {"model": "alpha-gemini", **chat_body(link.format(port=images.httpd.server_address[1]))},
        tara_key,
    )

    assert_refused_free(
        response,
        path="/v1/chat/completions",
        param="messages[0].content[1].image_url.url",
        reason="canonical form",
        tara=tara,
        before=before,
    )
    assert images.received == []


# --- other kinds keep the link; a failover fetches once ------------------------------------------------


@pytest.fixture
def gemini_then_openai(chat_group, monkeypatch, settings):
    """A model served by Gemini first and OpenAI second."""
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.0, "max_retries": 1}
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    gemini = upstream_make(name="gemini-first", base_url=GEMINI_BASE, api_key_env=KEY_ENV, kind="gemini")
    openai = upstream_make(name="openai-second", base_url=OPENAI_BASE, api_key_env=KEY_ENV, kind="openai")
    gemini.priority, openai.priority = 0, 1
    gemini.save(update_fields=["priority"])
    openai.save(update_fields=["priority"])
    return text_model_make(
        model_id="alpha-failover",
        group=chat_group,
        upstreams=[gemini, openai],
        upstream_model="gemini-2.5-flash",
        max_output_tokens=1000,
    )


def test_a_failover_from_gemini_to_openai_fetches_once_and_sends_openai_the_link(
    client, upstream, images, loopback_allowed, gemini_then_openai, tara, tara_key
):
    png = picture("PNG")
    link = images.serve("/a.png", png)
    upstream.post(
        GENERATE, status=503, json={"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}
    )
    upstream.post(
        f"{OPENAI_BASE}/chat/completions",
        json={
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "Red."}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 300, "completion_tokens": 10},
        },
    )
    before = balance(tara)

    response = post(client, "/v1/chat/completions", {"model": "alpha-failover", **chat_body(link)}, tara_key)

    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == "Red."
    assert images.received == ["/a.png"]
    gemini_calls = [call for call in upstream.calls if call.request.url.startswith(GEMINI_BASE)]
    openai_calls = [call for call in upstream.calls if call.request.url.startswith(OPENAI_BASE)]
    assert len(gemini_calls) >= 1 and len(openai_calls) == 1
    for call in gemini_calls:
        assert inline_parts(call) == [{"mimeType": "image/png", "data": base64.b64encode(png).decode()}]
    sent = json.loads(openai_calls[0].request.body)
    assert sent["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": link}}
    assert balance(tara) == before - COST
    assert UsageRecord.objects.get().upstream == "openai-second"


def test_an_openai_model_is_sent_the_link_and_the_gateway_fetches_nothing(
    client, upstream, images, chat_model, tara, tara_key
):
    """No allowance for loopback here: the link is not the gateway's to fetch, so no rule refuses it."""
    link = images.serve("/a.png", picture("PNG"))
    upstream.post(
        f"{OPENAI_BASE}/chat/completions",
        json={
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "Red."}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 300, "completion_tokens": 10},
        },
    )

    response = post(client, "/v1/chat/completions", {"model": "alpha-chat", **chat_body(link)}, tara_key)

    assert response.status_code == 200, response.content
    assert images.received == []
    assert json.loads(upstream.calls[0].request.body)["messages"][0]["content"][1]["image_url"] == {
        "url": link
    }


def large_picture() -> bytes:
    """A PNG of about 530 KB (noise does not compress): as base64 text, more tokens than ¥1 buys."""
    side = 420
    buffer = io.BytesIO()
    Image.frombytes("RGB", (side, side), random.Random(7).randbytes(side * side * 3)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("given", ["link", "data_url"])
def test_an_image_is_held_as_an_image_part_not_as_its_base64_text(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key, given
):
    """Gemini reads an image's bytes in the body, but the hold counts the image allowance for it, as
    it does for an image part of any other family: a ¥1 caller's call with a 530 KB image is served,
    and its hold is the same as with a tiny image."""
    upstream.post(GENERATE, json=ANSWER)
    holds = []
    for png in (picture("PNG"), large_picture()):
        if given == "link":
            image = images.serve(f"/{len(png)}.png", png)
        else:
            image = "data:image/png;base64," + base64.b64encode(png).decode()
        before = balance(tara)

        response = post(
            client, "/v1/chat/completions", {"model": "alpha-gemini", **chat_body(image)}, tara_key
        )

        assert response.status_code == 200, response.content
        assert inline_parts(upstream.calls[-1]) == [
            {"mimeType": "image/png", "data": base64.b64encode(png).decode()}
        ]
        assert balance(tara) == before - COST
        holds.append(Hold.objects.get(reference=response.headers["X-Request-Id"]))
    small, large = holds
    assert large.amount == small.amount < Decimal("0.05")
    assert (large.status, large.captured_amount) == ("captured", COST)
    assert ledger_check() == []


def test_an_object_shaped_like_a_gemini_image_in_a_tool_schema_is_held_by_its_bytes(
    client, upstream, gemini_model, tara, tara_key
):
    """Only the turns' parts are images: elsewhere (a tool's schema goes to Gemini as it is written)
    an `inlineData` object is text the provider reads, held by its bytes."""
    upstream.post(GENERATE, json=ANSWER)
    holds = []
    for size in (10, 100_000):
        schema = {
            "type": "object",
            "examples": [{"inlineData": {"mimeType": "image/png", "data": "A" * size}}],
        }
        tools = [{"type": "function", "function": {"name": "look", "parameters": schema}}]
        body = {"model": "alpha-gemini", "messages": [{"role": "user", "content": "Hi"}], "tools": tools}

        response = post(client, "/v1/chat/completions", body, tara_key)

        assert response.status_code == 200, response.content
        sent = json.loads(upstream.calls[-1].request.body)
        assert sent["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == schema
        holds.append(Hold.objects.get(reference=response.headers["X-Request-Id"]).amount)
    small, large = holds
    assert large - small >= Decimal(100_000 - 10) * Decimal("2.00") / Decimal(1_000_000)


def test_an_idempotent_replay_answers_the_kept_answer_without_downloading_the_link_again(
    client, upstream, images, loopback_allowed, gemini_model, tara, tara_key
):
    """The link is downloaded once, in the call the key runs; the replay answers what was kept even
    after the image's server has stopped serving it (a signed link that expired), and is not charged."""
    link = images.serve("/signed.png", picture("PNG"))
    upstream.post(GENERATE, json=ANSWER)
    before = balance(tara)
    body = {"model": "alpha-gemini", **chat_body(link)}
    headers = {"Authorization": f"Bearer {tara_key}", "Idempotency-Key": "look-once"}

    first = client.post(
        "/v1/chat/completions", data=json.dumps(body), content_type="application/json", headers=headers
    )
    del images.routes["/signed.png"]
    replay = client.post(
        "/v1/chat/completions", data=json.dumps(body), content_type="application/json", headers=headers
    )

    assert first.status_code == 200, first.content
    assert replay.status_code == 200, replay.content
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    assert images.received == ["/signed.png"]
    assert len([call for call in upstream.calls if call.request.url.startswith(GEMINI_BASE)]) == 1
    assert balance(tara) == before - COST
    assert UsageRecord.objects.filter(status=200, amount=COST).count() == 1
    assert ledger_check() == []
