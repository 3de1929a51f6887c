"""The one HTTP path to upstreams (`upstreams.transport`): bodies read whole in one piece, failures while
reading them, and the environment (proxies, ~/.netrc) read once per upstream."""

from __future__ import annotations

import base64
import gzip
import json
import time

import pytest

from api.upstream_errors import upstream_error_to_api_error
from tests.fake_upstream import _png
from tests.images.conftest import OPENAI_BASE, OPENAI_KEY, OPENAI_KEY_ENV
from upstreams.providers import adapter_for
from upstreams.providers.base import ImageRequest, UpstreamError
from upstreams.services import upstream_upsert

pytestmark = pytest.mark.django_db

GENERATIONS = f"{OPENAI_BASE}/images/generations"
LARGE_B64 = base64.b64encode(_png(pad_to=4_000_000)).decode()
REQUEST = ImageRequest(operation="generate", upstream_model="gpt-image-1", prompt="a fox")


def test_it_reads_a_large_answer_whole_and_keeps_its_base64_as_sent(openai_upstream, mocked):
    mocked.post(GENERATIONS, json={"created": 7, "data": [{"b64_json": LARGE_B64, "revised_prompt": "é"}]})
    result = adapter_for(openai_upstream).image_call(REQUEST)
    assert result.created == 7
    assert [(item.b64_json, item.revised_prompt) for item in result.items] == [(LARGE_B64, "é")]


def test_it_reads_a_gzip_encoded_answer(openai_upstream, mocked):
    answer = json.dumps({"created": 7, "data": [{"b64_json": LARGE_B64}]}).encode()
    mocked.post(
        GENERATIONS,
        body=gzip.compress(answer),
        content_type="application/json",
        headers={"Content-Encoding": "gzip"},
    )
    assert adapter_for(openai_upstream).image_call(REQUEST).items[0].b64_json == LARGE_B64


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_its_content_encoding_does_not_decode_is_a_502_named_for_it(openai_upstream, mocked, encoding):
    answer = json.dumps({"created": 7, "data": [{"b64_json": "iVBORw0KGgo="}]}).encode()
    mocked.post(
        GENERATIONS, body=answer, content_type="application/json", headers={"Content-Encoding": encoding}
    )

    with pytest.raises(UpstreamError) as info:
        adapter_for(openai_upstream).image_call(REQUEST)

    error = info.value
    assert error.message == "upstream answered a body its Content-Encoding does not decode"
    assert (error.status, error.retryable, error.outcome_unknown) == (502, False, True)
    api_error = upstream_error_to_api_error(error=error, upstream=openai_upstream)
    assert (api_error.status, api_error.code) == (502, "upstream_error")


def test_it_reads_a_utf8_answer_with_a_byte_order_mark(openai_upstream, mocked):
    answer = json.dumps({"created": 7, "data": [{"url": "https://api.provider.test/a.png"}]})
    mocked.post(GENERATIONS, body=b"\xef\xbb\xbf" + answer.encode(), content_type="application/json")
    assert adapter_for(openai_upstream).image_call(REQUEST).items[0].url == "https://api.provider.test/a.png"


def test_an_answer_cut_short_is_a_502_whose_outcome_is_unknown(raw_upstream):
    upstream = raw_upstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        b'{"created": 1, "data": [{"b64_json": "iVBORw0KGgo'
    )
    with pytest.raises(UpstreamError) as info:
        adapter_for(upstream).image_call(REQUEST)
    error = info.value
    assert (error.status, error.retryable, error.outcome_unknown) == (502, False, True)
    api_error = upstream_error_to_api_error(error=error, upstream=upstream)
    assert (api_error.status, api_error.code) == (502, "upstream_error")


def test_an_answer_that_stalls_mid_body_is_a_504_whose_outcome_is_unknown(raw_upstream):
    upstream = raw_upstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        b'{"created": 1, "data": [',
        hold_seconds=30,
    )
    # The call's deadline bounds the read; the server holds the connection far longer.
    with pytest.raises(UpstreamError) as info:
        adapter_for(upstream, deadline=time.monotonic() + 0.5).image_call(REQUEST)
    error = info.value
    assert (error.status, error.retryable, error.outcome_unknown) == (504, False, True)
    api_error = upstream_error_to_api_error(error=error, upstream=upstream)
    assert (api_error.status, api_error.code) == (504, "upstream_timeout")


def test_an_error_answer_keeps_its_body_for_the_caller(openai_upstream, mocked):
    mocked.post(GENERATIONS, status=400, body="size must be one of 1024x1024", content_type="text/plain")
    with pytest.raises(UpstreamError) as info:
        adapter_for(openai_upstream).image_call(REQUEST)
    assert (info.value.status, info.value.body) == (400, "size must be one of 1024x1024")


def test_the_provider_key_is_sent_even_when_netrc_names_the_upstream_host(
    openai_upstream, mocked, monkeypatch, tmp_path
):
    # requests would replace the Authorization header with ~/.netrc's password for the host.
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.provider.test login someone password netrc-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    mocked.post(GENERATIONS, json={"created": 1, "data": [{"url": "https://api.provider.test/a.png"}]})
    adapter_for(openai_upstream).image_call(REQUEST)
    assert mocked.calls[0].request.headers["Authorization"] == f"Bearer {OPENAI_KEY}"


def proxied_upstream(name: str, base_url: str):
    upstream, _ = upstream_upsert(
        name=name,
        kind="openai",
        base_url=base_url,
        api_key_env=OPENAI_KEY_ENV,
        timeout_seconds=30,
        priority=0,
        weight=1,
        enabled=True,
    )
    return upstream


@pytest.fixture
def proxy_env(monkeypatch, provider_key):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("https_proxy", "http://proxy.internal:3128")
    monkeypatch.setenv("no_proxy", "direct.provider.test")


def test_it_calls_through_the_proxy_the_environment_names(proxy_env, mocked):
    upstream = proxied_upstream("proxied", "https://proxied.provider.test/v1")
    mocked.post("https://proxied.provider.test/v1/images/generations", json={"data": [{"url": "https://x"}]})
    adapter_for(upstream).image_call(REQUEST)
    assert mocked.calls[0].request.req_kwargs["proxies"].get("https") == "http://proxy.internal:3128"


def test_it_calls_directly_a_host_the_environment_exempts_from_the_proxy(proxy_env, mocked):
    upstream = proxied_upstream("direct", "https://direct.provider.test/v1")
    mocked.post("https://direct.provider.test/v1/images/generations", json={"data": [{"url": "https://x"}]})
    adapter_for(upstream).image_call(REQUEST)
    assert mocked.calls[0].request.req_kwargs["proxies"].get("https") is None


IMAGE_ANSWER = json.dumps({"created": 1, "data": [{"url": "https://api.provider.test/a.png"}]}).encode()


def http_answer(*headers: str, status: str = "200 OK", body: bytes = IMAGE_ANSWER) -> bytes:
    """An answer for a RawUpstream, which closes each connection after answering (so it says so)."""
    head = [
        f"HTTP/1.1 {status}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_it_never_sends_back_a_cookie_an_upstream_set(raw_upstream_served):
    # One transport serves every caller's calls to an upstream: a cookie set for one call must not
    # ride along with the next (possibly another account's).
    server, upstream = raw_upstream_served(http_answer("Set-Cookie: session=caller-a; Path=/"))
    adapter_for(upstream).image_call(REQUEST)
    adapter_for(upstream).image_call(REQUEST)
    assert len(server.received) == 2
    assert all(b"\r\ncookie:" not in head.lower() for head in server.received)


def test_a_redirect_from_the_api_is_an_error_and_is_not_followed(raw_upstream_served):
    server, upstream = raw_upstream_served(
        http_answer("Location: /v1/elsewhere", status="307 Temporary Redirect", body=b"")
    )
    with pytest.raises(UpstreamError) as info:
        adapter_for(upstream).image_call(REQUEST)
    assert info.value.status == 307
    assert len(server.received) == 1  # the POST was not repeated to the new location


def test_a_kept_alive_connection_the_upstream_closed_while_idle_is_not_reused(raw_upstream_served):
    # The answer does not say "Connection: close", so the connection goes back to the pool; the
    # server then closes it. The next call must see that before sending (urllib3's own check of a
    # pooled connection) and open a new one, not fail on the dead socket.
    server, upstream = raw_upstream_served(http_answer().replace(b"Connection: close\r\n", b""))
    adapter_for(upstream).image_call(REQUEST)
    time.sleep(0.5)  # the server's close arrives (it closes right after answering)
    adapter_for(upstream).image_call(REQUEST)  # no UpstreamError: sent on a new socket
    assert len(server.received) == 2  # the server answers one request per connection


def test_it_prepares_each_call_with_its_own_body_and_length(raw_upstream_served):
    server, upstream = raw_upstream_served(http_answer())
    adapter_for(upstream).image_call(REQUEST)
    adapter_for(upstream).image_call(
        ImageRequest(operation="generate", upstream_model="gpt-image-1", prompt="a much longer prompt")
    )
    first, second = (head.lower() for head in server.received)
    assert first.startswith(b"post /v1/images/generations http/1.1")
    assert f"authorization: bearer {OPENAI_KEY}".lower().encode() in second
    lengths = [int(head.split(b"content-length: ")[1].split(b"\r\n")[0]) for head in (first, second)]
    assert lengths[1] - lengths[0] == len("a much longer prompt") - len("a fox")
