"""Anthropic's 529 "overloaded" is a 503 by another number: the retry loop fails over to the next
upstream, and when every upstream is overloaded the caller gets 503 with Retry-After."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from api.errors import api_error_for
from api.upstream_errors import upstream_error_to_api_error
from tests.factories import upstream_make
from tests.upstreams.conftest import ANTHROPIC_KEY_ENV, text_request
from upstreams.circuit import circuit_stats_flush
from upstreams.errors import UpstreamError, UpstreamsOverloaded
from upstreams.providers import adapter_for
from upstreams.providers.base import MESSAGES
from upstreams.resilience import upstream_call_resilient

pytestmark = pytest.mark.django_db

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
REQUEST = text_request(MESSAGES, {"model": "claude", "max_tokens": 5, "messages": []})


@pytest.fixture(autouse=True)
def clean_circuits():
    circuit_stats_flush()
    cache.clear()
    yield
    circuit_stats_flush()
    cache.clear()


@pytest.fixture
def two_upstreams(anthropic_upstream):
    second = upstream_make(
        name="anthropic-2",
        kind="anthropic",
        base_url="https://second.anthropic.test/v1",
        api_key_env=ANTHROPIC_KEY_ENV,
        priority=1,
    )
    return [anthropic_upstream, second]


def run(upstreams):
    return upstream_call_resilient(
        upstreams=upstreams,
        attempt=lambda upstream, deadline: adapter_for(upstream, deadline=deadline).call(MESSAGES, REQUEST),
        classify=lambda error, upstream: upstream_error_to_api_error(error=error, upstream=upstream),
        sleep=lambda seconds: None,
    )


def test_a_529_fails_over_to_the_next_upstream(two_upstreams, mocked):
    first, second = two_upstreams
    mocked.post(f"{first.base_url}/messages", json=OVERLOADED, status=529)
    mocked.post(f"{second.base_url}/messages", json={"id": "msg_1"})
    reply, used = run(two_upstreams)
    assert (reply.status, used.name) == (200, second.name)


def test_every_upstream_overloaded_answers_503_with_retry_after(two_upstreams, mocked):
    for upstream in two_upstreams:
        mocked.post(f"{upstream.base_url}/messages", json=OVERLOADED, status=529)
    with pytest.raises(UpstreamsOverloaded) as info:
        run(two_upstreams)
    assert api_error_for(info.value).status == 503
    assert "Retry-After" in api_error_for(info.value).headers


def test_a_single_529_is_answered_as_a_503_would_be(anthropic_upstream):
    def answer(status):
        error = UpstreamError("x", status=status, retryable=True, sent=True, body=OVERLOADED)
        api_error = upstream_error_to_api_error(error=error, upstream=anthropic_upstream)
        return api_error.status, api_error.code

    assert answer(529) == answer(503)
