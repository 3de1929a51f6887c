"""The text endpoints through the Django test client, with the upstreams behind `responses`: what is
forwarded, what the caller gets, and that the wallet moves by exactly the cost of the usage reported."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from accounts.services import account_set_groups
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from keys.services import oauth_token_create
from tests.chat.conftest import ANTHROPIC_BASE, OPENAI_BASE, PROVIDER_KEY, sent_json
from upstreams.sse import SSE_EVENT_MAX_BYTES

pytestmark = pytest.mark.django_db

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
RESPONSES_URL = f"{OPENAI_BASE}/responses"
MESSAGES_URL = f"{ANTHROPIC_BASE}/messages"
COUNT_URL = f"{ANTHROPIC_BASE}/messages/count_tokens"


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def post(client, path, body, key, **headers):
    return client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}", **headers},
    )


def chat_completion(*, prompt=1200, cached=200, completion=345, content="Hello!"):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "vendor-chat-1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 100},
        },
    }


def test_it_forwards_the_body_with_only_the_model_replaced_and_charges_the_exact_cost(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(CHAT_URL, json=chat_completion())
    body = {
        "model": "alpha-chat",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.2,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "future_field": {"nested": [1, 2, 3]},
        "max_completion_tokens": 500,
    }
    response = post(client, "/v1/chat/completions", body, tara_key)

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Hello!"
    sent = sent_json(upstream.calls[0])
    assert sent == {**body, "model": "vendor-chat-1"}
    assert upstream.calls[0].request.headers["Authorization"] == f"Bearer {PROVIDER_KEY}"
    # (1200 - 200) x ¥2 + 200 x ¥0.50 + 345 x ¥8, per million tokens
    cost = Decimal("0.00486")
    assert balance(tara) == Decimal("1.00") - cost
    record = UsageRecord.objects.get(endpoint="chat.completions")
    assert (record.status, record.amount, record.model_id, record.upstream) == (
        200,
        cost,
        "alpha-chat",
        "openai-main",
    )
    assert (record.input_tokens, record.cached_tokens, record.cache_write_tokens, record.output_tokens) == (
        1000,
        200,
        0,
        345,
    )
    hold = Hold.objects.get(reference=record.request_id)
    assert hold.captured_amount == cost and hold.amount > cost
    assert Wallet.objects.get(account=tara).held == 0
    assert ledger_check() == []


def test_a_tiny_call_costs_its_exact_fraction_of_a_fen(client, upstream, chat_model, tara, tara_key):
    upstream.post(CHAT_URL, json=chat_completion(prompt=12, cached=0, completion=0))
    response = post(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    assert response.status_code == 200
    assert balance(tara) == Decimal("1.00") - Decimal("0.000024")
    assert LedgerEntry.objects.get(kind="charge").amount == Decimal("-0.000024")


# No provider counts so many tokens; a broken or hostile one may say so, in any number of digits.
@pytest.mark.parametrize("huge", [2**40, 10**30], ids=["2^40", "10^30"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_usage_over_what_a_record_holds_is_charged_the_hold_and_recorded_at_the_most(
    client, upstream, chat_model, tara, tara_key, stream, huge
):
    if stream:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "vendor-chat-1"}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": {"prompt_tokens": huge, "completion_tokens": huge}},
        ]
        body = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
        upstream.post(CHAT_URL, body=body, content_type="text/event-stream")
    else:
        upstream.post(CHAT_URL, json=chat_completion(prompt=huge, cached=0, completion=huge))
    body = {"model": "alpha-chat", "stream": stream, "messages": [{"role": "user", "content": "Hi"}]}

    response = post(client, "/v1/chat/completions", body, tara_key)

    assert response.status_code == 200
    if stream:
        assert b"".join(response.streaming_content).endswith(b"data: [DONE]\n\n")
    record = UsageRecord.objects.get(endpoint="chat.completions")
    assert (record.status, record.input_tokens, record.output_tokens) == (200, 2**31 - 1, 2**31 - 1)
    hold = Hold.objects.get(reference=record.request_id)
    assert hold.captured_amount == hold.amount == record.amount  # the cost, capped at the hold
    assert balance(tara) == Decimal("1.00") - hold.amount
    assert ledger_check() == []


def test_a_stream_whose_event_outgrows_the_bound_is_cut_and_not_charged(
    client, upstream, chat_model, tara, tara_key
):
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "vendor-chat-1"}
    first = {**chunk, "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
    # An event that ends only 1 MB past the bound, then the stream's end.
    endless = (
        f"data: {json.dumps(first)}\n\ndata: " + "x" * (SSE_EVENT_MAX_BYTES + 2**20) + "\n\ndata: [DONE]\n\n"
    )
    upstream.post(CHAT_URL, body=endless, content_type="text/event-stream")
    body = {"model": "alpha-chat", "stream": True, "messages": [{"role": "user", "content": "Hi"}]}

    response = post(client, "/v1/chat/completions", body, tara_key)

    assert response.status_code == 200
    events = b"".join(response.streaming_content).decode().split("\n\n")
    assert json.loads(events[0].removeprefix("data: ")) == first
    assert json.loads(events[1].removeprefix("data: "))["error"]["code"] == "upstream_stream_cut"
    assert balance(tara) == Decimal("1.00")
    record = UsageRecord.objects.get(endpoint="chat.completions")
    assert (record.status, record.error_code, record.amount) == (502, "upstream_stream_cut", 0)
    assert Hold.objects.get(reference=record.request_id).status == "released"
    assert ledger_check() == []


def test_a_first_event_that_outgrows_the_bound_is_the_upstreams_bad_answer_and_not_charged(
    client, upstream, chat_model, tara, tara_key
):
    endless = "data: " + "x" * (SSE_EVENT_MAX_BYTES + 2**20) + "\n\ndata: [DONE]\n\n"
    upstream.post(CHAT_URL, body=endless, content_type="text/event-stream")
    body = {"model": "alpha-chat", "stream": True, "messages": [{"role": "user", "content": "Hi"}]}

    response = post(client, "/v1/chat/completions", body, tara_key)

    # It reached the provider, which answered wrongly: not "could not reach", and not retried.
    assert response.status_code == 502, response.content
    assert response.json()["error"]["code"] == "upstream_error"
    assert len(upstream.calls) == 1
    assert balance(tara) == Decimal("1.00")
    record = UsageRecord.objects.get(endpoint="chat.completions")
    assert (record.status, record.amount) == (502, 0)
    assert Hold.objects.get(reference=record.request_id).status == "released"


def test_an_answer_over_the_size_bound_is_the_upstreams_failure_and_not_charged(
    client, upstream, chat_model, tara, tara_key, settings
):
    settings.GATEWAY_UPSTREAM_ANSWER_MAX_BYTES = 2**20
    upstream.post(CHAT_URL, json=chat_completion(content="x" * 2**20))
    body = {"model": "alpha-chat", "messages": [{"role": "user", "content": "Hi"}]}

    response = post(client, "/v1/chat/completions", body, tara_key)

    assert response.status_code == 502, response.content
    assert response.json()["error"]["code"] == "upstream_error"
    assert len(upstream.calls) == 1  # the upstream may have answered in full: not asked again
    assert balance(tara) == Decimal("1.00")
    record = UsageRecord.objects.get(endpoint="chat.completions")
    assert (record.status, record.amount) == (502, 0)
    assert Hold.objects.get(reference=record.request_id).status == "released"


@pytest.mark.parametrize("answer", ["null", "[1]", '"x"', "7", "{not json"])
@pytest.mark.parametrize(
    ("path", "model", "url"),
    [
        ("/v1/chat/completions", "alpha-chat", CHAT_URL),
        ("/v1/chat/completions", "alpha-claude", MESSAGES_URL),
        ("/v1/messages", "alpha-chat", CHAT_URL),
        ("/v1/messages/count_tokens", "alpha-claude", COUNT_URL),
    ],
    ids=["native", "translated", "translated-messages", "count_tokens"],
)
def test_an_answer_that_is_not_a_json_object_is_the_upstreams_failure_and_not_charged(
    client, upstream, chat_model, claude_model, tara, tara_key, path, model, url, answer
):
    upstream.post(url, body=answer, content_type="application/json")
    body = {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]}

    response = post(client, path, body, tara_key)

    assert response.status_code == 502, response.content
    assert "without a valid JSON body" in response.json()["error"]["message"]
    assert balance(tara) == Decimal("1.00")
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    record = UsageRecord.objects.get()
    assert (record.status, record.amount) == (502, 0)
    assert ledger_check() == []


def test_responses_are_billed_from_their_usage(client, upstream, chat_model, tara, tara_key):
    upstream.post(
        RESPONSES_URL,
        json={
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "output": [],
            "usage": {
                "input_tokens": 500,
                "input_tokens_details": {"cached_tokens": 100},
                "output_tokens": 50,
                "output_tokens_details": {"reasoning_tokens": 20},
                "total_tokens": 550,
            },
        },
    )
    response = post(
        client, "/v1/responses", {"model": "alpha-chat", "input": "Hi", "max_output_tokens": 64}, tara_key
    )

    assert response.status_code == 200
    assert sent_json(upstream.calls[0])["model"] == "vendor-chat-1"
    # 400 x 2 + 100 x 0.5 + 50 x 8 = 1250 per million
    assert balance(tara) == Decimal("1.00") - Decimal("0.00125")


def test_messages_go_to_anthropic_with_its_headers_and_are_billed_with_cache_tokens(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(
        MESSAGES_URL,
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "vendor-claude-1",
            "content": [{"type": "text", "text": "Hi there"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 100,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 200,
                "output_tokens": 30,
            },
        },
    )
    response = client.post(
        "/v1/messages",
        data=json.dumps(
            {"model": "alpha-claude", "max_tokens": 256, "messages": [{"role": "user", "content": "Hi"}]}
        ),
        content_type="application/json",
        headers={"x-api-key": tara_key, "anthropic-beta": "prompt-caching-2024-07-31"},
    )

    assert response.status_code == 200, response.content
    request = upstream.calls[0].request
    assert request.headers["x-api-key"] == PROVIDER_KEY
    assert "Authorization" not in request.headers
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    # 100 x 3 + 1000 x 0.30 + 200 x 3.75 + 30 x 15 = 1800 per million
    assert balance(tara) == Decimal("1.00") - Decimal("0.0018")
    record = UsageRecord.objects.get(endpoint="messages")
    assert (record.input_tokens, record.cached_tokens, record.cache_write_tokens, record.output_tokens) == (
        100,
        1000,
        200,
        30,
    )


def test_count_tokens_is_free_but_answered(client, upstream, claude_model, tara, tara_key):
    upstream.post(COUNT_URL, json={"input_tokens": 42})
    response = client.post(
        "/v1/messages/count_tokens",
        data=json.dumps({"model": "alpha-claude", "messages": [{"role": "user", "content": "Hi"}]}),
        content_type="application/json",
        headers={"x-api-key": tara_key, "anthropic-version": "2023-06-01"},
    )

    assert response.status_code == 200
    assert response.json() == {"input_tokens": 42}
    assert balance(tara) == Decimal("1.00")
    assert not Hold.objects.exists()
    assert UsageRecord.objects.get(endpoint="messages.count_tokens").amount == 0


def test_an_upstream_refusal_passes_through_with_its_status_and_costs_nothing(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        status=400,
        json={
            "error": {
                "message": "Unknown parameter: 'foo'.",
                "type": "invalid_request_error",
                "param": "foo",
                "code": "unknown_parameter",
            }
        },
    )
    response = post(
        client, "/v1/chat/completions", {"model": "alpha-chat", "messages": [], "foo": 1}, tara_key
    )

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Unknown parameter: 'foo'."
    assert response.json()["error"]["code"] == "unknown_parameter"
    assert balance(tara) == Decimal("1.00")
    assert Wallet.objects.get(account=tara).held == 0
    record = UsageRecord.objects.get()
    # The record says why the call failed: the upstream's own code, for the usage page and CSV.
    assert (record.status, record.error_code, record.amount) == (400, "unknown_parameter", 0)


def test_a_refusal_without_a_code_is_recorded_with_the_upstreams_error_type(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        status=422,
        json={"error": {"message": "Bad messages.", "type": "invalid_messages", "param": None, "code": None}},
    )
    response = post(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    assert response.status_code == 422
    assert response.json()["error"]["type"] == "invalid_messages"
    assert response.json()["error"]["code"] is None  # passed through as the upstream gave it
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code) == (422, "invalid_messages")
    assert balance(tara) == Decimal("1.00")


def test_an_anthropic_refusal_passes_through_in_anthropics_shape(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(
        MESSAGES_URL,
        status=400,
        json={
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "messages: field required"},
        },
    )
    response = post(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 5}, tara_key)

    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "messages: field required"},
    }
    assert balance(tara) == Decimal("1.00")
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code) == (400, "invalid_request_error")  # Anthropic's error type


def test_an_anthropic_upstreams_refusal_in_openais_shape_reaches_a_messages_caller_in_anthropics(
    client, upstream, claude_model, tara, tara_key
):
    # An Anthropic-compatible server may answer its errors in OpenAI's shape; the anthropic SDK and
    # the agents built on it read Anthropic's.
    upstream.post(
        MESSAGES_URL,
        status=400,
        json={
            "error": {"message": "Bad model.", "type": "invalid_request_error", "param": None, "code": "bad"}
        },
    )
    response = post(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 5}, tara_key)

    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"bad: Bad model. (request id: {response['x-request-id']})",
        },
    }
    assert response["x-error-code"] == "bad"
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.amount) == (400, "bad", 0)
    assert balance(tara) == Decimal("1.00")


def test_an_openai_upstreams_refusal_in_anthropics_shape_reaches_a_chat_caller_in_openais(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        status=422,
        json={"type": "error", "error": {"type": "invalid_request_error", "message": "Bad messages."}},
    )
    response = post(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["message"] == f"Bad messages. (request id: {response['x-request-id']})"
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request_error")
    assert "type" not in response.json()
    assert UsageRecord.objects.get().error_code == "invalid_request_error"


def test_upstream_rate_limit_headers_are_not_passed_to_the_caller(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        json=chat_completion(),
        headers={"x-ratelimit-remaining-requests": "99", "anthropic-ratelimit-tokens-remaining": "5"},
    )
    response = post(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    assert response.status_code == 200
    assert not [name for name in response.headers if "ratelimit" in name.lower()]


def test_server_errors_are_retried_and_failures_cost_nothing(
    client, upstream, chat_model, tara, tara_key, settings
):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.0, "max_retries": 1}
    upstream.post(CHAT_URL, status=500, json={"error": {"message": "boom"}})
    upstream.post(CHAT_URL, status=500, json={"error": {"message": "boom"}})
    response = post(
        client,
        "/v1/chat/completions",
        {"model": "alpha-chat", "messages": []},
        tara_key,
        **{"X-Request-Id": "req-fail-1"},
    )

    assert response.status_code == 502
    assert len(upstream.calls) == 2
    assert balance(tara) == Decimal("1.00")
    assert Hold.objects.get(reference="req-fail-1").status == "released"
    assert UsageRecord.objects.get(request_id="req-fail-1").amount == 0


def test_an_idempotency_key_replays_the_answer_and_charges_once(client, upstream, chat_model, tara, tara_key):
    upstream.post(CHAT_URL, json=chat_completion())
    body = {"model": "alpha-chat", "messages": [{"role": "user", "content": "Hi"}]}
    first = post(client, "/v1/chat/completions", body, tara_key, **{"Idempotency-Key": "k-1"})
    again = post(client, "/v1/chat/completions", body, tara_key, **{"Idempotency-Key": "k-1"})

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert len(upstream.calls) == 1
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert balance(tara) == Decimal("1.00") - Decimal("0.00486")


def test_an_oauth_token_selects_the_group_with_a_prefixed_model(
    client, upstream, chat_model, tara, chat_group, alpha_group
):
    account_set_groups(account=tara, allowed_groups=[alpha_group, chat_group], current_group=alpha_group)
    alpha_group.allow_group_override = True
    alpha_group.save()
    _, token = oauth_token_create(account=tara, scopes=["models:invoke"], expires_in_seconds=600)
    upstream.post(CHAT_URL, json=chat_completion())

    unprefixed = post(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, token)
    prefixed = post(
        client, "/v1/chat/completions", {"model": f"{chat_group.pk}:alpha-chat", "messages": []}, token
    )

    assert unprefixed.status_code == 403  # its current group (Alpha-Image) has no such model
    assert prefixed.status_code == 200
    assert sent_json(upstream.calls[0])["model"] == "vendor-chat-1"
    assert UsageRecord.objects.get(status=200).group_id == chat_group.pk
