"""What the gateway keeps of a translated `/v1/responses` model's answers: each answer (the call's
own input and its output items) is kept for the caller's account unless it sent `store: false`. A
later call continuing it by `previous_response_id` (the OpenAI Agents SDK's and LangChain's chaining)
is sent upstream with the conversation before it, and one naming an item by `item_reference` (the
Vercel AI SDK's default) with the item in its place; GET and DELETE /v1/responses/{id} retrieve and
delete a kept response. What is not kept is a 400 or a 404 that reaches no upstream and charges
nothing."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import Hold, UsageRecord
from billing.selectors import ledger_check
from chat.models import KeptResponse, ResponseItem
from chat.response_store import KEPT_DEPTH
from keys.services import api_key_create, oauth_token_create
from tests.chat.conftest import (
    ANTHROPIC_BASE,
    KEY_ENV,
    OPENAI_BASE,
    assert_in_family_shape,
    sent_json,
    sse_body,
)
from tests.chat.conftest import responses_post as post
from tests.chat.test_fuzz_bodies import FAMILIES, JSON_VALUES, placed
from tests.factories import text_model_make, upstream_make
from tests.fuzz_values import fuzz_settings

pytestmark = pytest.mark.django_db

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
USAGE = {"prompt_tokens": 30, "completion_tokens": 8}
OPENAI_ANSWER = {  # an answer of OpenAI's own Responses API
    "id": "resp_from_openai",
    "object": "response",
    "status": "completed",
    "output": [],
    "usage": {"input_tokens": 10, "output_tokens": 2},
}


def chat_answer(message: dict) -> dict:
    return {
        "choices": [{"message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": USAGE,
    }


def chunk(delta=None, finish=None, usage=None) -> dict:
    """A Chat Completions stream chunk: a delta (and its finish reason), or the usage alone."""
    body = {"choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return {**body, "usage": usage} if usage else body


def stream_answers(upstream, *chunks: dict) -> None:
    """The upstream answers the next call with these chunks, as a stream."""
    events = sse_body(*(("", c) for c in chunks), ("", "[DONE]"))
    upstream.post(CHAT_URL, body=events, content_type="text/event-stream")


def last_event(response) -> dict:
    """The data of a streamed answer's last event (`response.completed` for a whole answer)."""
    text = b"".join(response.streaming_content).decode()
    return json.loads(text.strip().split("\n\n")[-1].split("\ndata: ", 1)[1])


def continue_from(client, previous_response_id, key):
    """A call continuing `previous_response_id`."""
    body = {"model": "alpha-deepseek", "input": "Again.", "previous_response_id": previous_response_id}
    return post(client, body, key)


def first_turn(client, upstream, key, **extra):
    upstream.post(CHAT_URL, json=chat_answer({"content": "Hello, Tara.", "reasoning_content": "A greeting."}))
    response = post(client, {"model": "alpha-deepseek", "input": "Hi, I am Tara.", **extra}, key)
    assert response.status_code == 200, response.content
    return response.json()["output"]


def second_turn(output: list[dict]) -> dict:
    """What the AI SDK sends next: the earlier answer's items by reference, then the new turn."""
    return {
        "model": "alpha-deepseek",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Hi, I am Tara."}]},
            *({"type": "item_reference", "id": item["id"]} for item in output),
            {"role": "user", "content": [{"type": "input_text", "text": "What is my name?"}]},
        ],
    }


def test_an_answers_items_are_kept_and_a_later_reference_sends_them_upstream(
    client, upstream, deepseek, tara, tara_key
):
    output = first_turn(client, upstream, tara_key)
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert sorted(ResponseItem.objects.filter(account=tara).values_list("item_id", flat=True)) == sorted(
        item["id"] for item in output
    )
    upstream.post(CHAT_URL, json=chat_answer({"content": "Your name is Tara."}))

    response = post(client, second_turn(output), tara_key)

    assert response.status_code == 200, response.content
    assert response.json()["output"][0]["content"][0]["text"] == "Your name is Tara."
    messages = sent_json(upstream.calls[1])["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "Hello, Tara.",
        "reasoning_content": "A greeting.",  # as DeepSeek wants its reasoning back
    }
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert UsageRecord.objects.filter(status=200).count() == 2
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert ledger_check() == []


def test_a_streamed_answers_items_are_kept_once_it_completes(client, upstream, deepseek, tara, tara_key):
    calls = [{"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": "{}"}}]
    stream_answers(
        upstream,
        chunk({"role": "assistant", "content": "Checking."}),
        chunk({"tool_calls": calls}),
        chunk({}, finish="tool_calls"),
        chunk(usage=USAGE),
    )

    response = post(client, {"model": "alpha-deepseek", "input": "Weather?", "stream": True}, tara_key)

    completed = last_event(response)
    assert completed["type"] == "response.completed"
    kept = {item.item_id: item.item for item in ResponseItem.objects.filter(account=tara)}
    assert kept == {item["id"]: item for item in completed["response"]["output"]}
    assert [item["type"] for item in kept.values()] == ["message", "function_call"]


def test_an_answer_with_store_false_keeps_nothing_and_a_reference_to_it_is_a_404(
    client, upstream, deepseek, tara, tara_key
):
    output = first_turn(client, upstream, tara_key, store=False)
    assert not ResponseItem.objects.exists()

    response = post(client, second_turn(output), tara_key)

    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "input[1]")
    assert f"Item with id '{output[0]['id']}' not found" in error["message"]
    assert len(upstream.calls) == 1  # the second call reached no upstream
    assert UsageRecord.objects.get(status=404).amount == 0
    assert UsageRecord.objects.filter(status=200).count() == 1


def test_an_item_is_kept_for_its_account_only(client, upstream, deepseek, tara, tara_key, chat_group):
    output = first_turn(client, upstream, tara_key)
    other = account_create(username="uma", email="uma@example.com", password="uma-password-1")
    account_set_groups(account=other, allowed_groups=[chat_group], current_group=chat_group)
    wallet_top_up(account=other, amount="1.00", reference="fixture")
    _, other_key = api_key_create(account=other, group=chat_group, label="other")

    response = post(client, second_turn(output), other_key)

    assert response.status_code == 404
    assert response.json()["error"]["param"] == "input[1]"
    assert len(upstream.calls) == 1


@pytest.mark.parametrize("reference", [{"type": "item_reference"}, {"type": "item_reference", "id": 7}])
def test_a_reference_without_a_string_id_is_a_400_naming_it(
    client, upstream, deepseek, tara, tara_key, reference
):
    response = post(client, {"model": "alpha-deepseek", "input": [reference]}, tara_key)

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input[0].id"
    assert len(upstream.calls) == 0


def test_a_reference_holding_nul_is_a_404(client, upstream, deepseek, tara, tara_key):
    response = post(
        client, {"model": "alpha-deepseek", "input": [{"type": "item_reference", "id": "msg_\x00"}]}, tara_key
    )

    assert response.status_code == 404
    assert len(upstream.calls) == 0


def test_a_call_served_by_openais_responses_api_sends_what_it_names_as_it_came(
    client, upstream, chat_model, tara, tara_key
):
    """OpenAI keeps the items of its own answers: nothing is kept here, and references go on."""
    upstream.post(f"{OPENAI_BASE}/responses", json=OPENAI_ANSWER)
    body = {
        "model": "alpha-chat",
        "previous_response_id": "resp_at_openai",
        "input": [{"type": "item_reference", "id": "msg_at_openai"}],
    }

    response = post(client, body, tara_key)

    assert response.status_code == 200, response.content
    sent = sent_json(upstream.calls[0])
    assert (sent["previous_response_id"], sent["input"]) == (body["previous_response_id"], body["input"])
    assert not ResponseItem.objects.exists() and not KeptResponse.objects.exists()


def test_purge_response_items_deletes_items_kept_without_their_response_by_their_age(tara, settings):
    settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = 30
    for item_id, age in (("msg_old", 31), ("msg_recent", 29)):
        item = ResponseItem.objects.create(account=tara, item_id=item_id, item={"id": item_id})
        ResponseItem.objects.filter(pk=item.pk).update(created_at=timezone.now() - timedelta(days=age))
    out = StringIO()

    call_command("purge_response_items", stdout=out)

    assert list(ResponseItem.objects.values_list("item_id", flat=True)) == ["msg_recent"]
    assert (
        "Deleted 1 kept response(s) and item(s) of conversations idle for more than 30 days."
        in out.getvalue()
    )


def test_items_of_an_answer_translated_through_two_translators_are_kept(
    client, upstream, claude_model, tara, tara_key
):
    """Responses → Chat Completions → Messages: the caller's items are the outer translator's."""
    claude = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "vendor-claude-1",
        "content": [{"type": "text", "text": "Hello, Tara."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 12, "output_tokens": 4},
    }
    upstream.post(f"{ANTHROPIC_BASE}/messages", json=claude)
    first = post(client, {"model": "alpha-claude", "input": "Hi, I am Tara."}, tara_key)
    output = first.json()["output"]
    assert [item.item_id for item in ResponseItem.objects.all()] == [output[0]["id"]]

    response = post(client, {**second_turn(output), "model": "alpha-claude"}, tara_key)

    assert response.status_code == 200, response.content
    sent = sent_json(upstream.calls[1])["messages"]
    assert sent[1] == {"role": "assistant", "content": [{"type": "text", "text": "Hello, Tara."}]}


@fuzz_settings()
@given(value=JSON_VALUES)
def test_any_json_as_a_references_id_is_never_a_server_error(
    client, upstream, deepseek, tara, tara_key, value
):
    upstream.post(CHAT_URL, json=chat_answer({"content": "ok"}))
    body = {"model": "alpha-deepseek", "input": [{"type": "item_reference", "id": value}, "x", value]}

    response = post(client, body, tara_key)

    assert response.status_code in (400, 404), response.content[:500]
    assert_in_family_shape(response, "compatible")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_answer_holding_what_no_text_column_can_is_kept_with_it_replaced(
    client, upstream, deepseek, tara, tara_key, stream
):
    """An upstream's text may hold NUL or half of a surrogate pair, which PostgreSQL's jsonb refuses:
    the answer is the caller's as it came, charged once, and its item is kept with U+FFFD there."""
    odd = "a\x00b\ud800c"
    if stream:
        stream_answers(
            upstream, chunk({"role": "assistant", "content": odd}), chunk({}, finish="stop", usage=USAGE)
        )
    else:
        upstream.post(CHAT_URL, json=chat_answer({"content": odd}))

    response = post(client, {"model": "alpha-deepseek", "input": "Hi", "stream": stream}, tara_key)

    assert response.status_code == 200
    if stream:
        assert b"response.completed" in b"".join(response.streaming_content)
    item = ResponseItem.objects.get(account=tara).item
    assert item["content"][0]["text"] == "a\ufffdb\ufffdc"
    assert UsageRecord.objects.get().status == 200
    assert ledger_check() == []


# --- previous_response_id ---------------------------------------------------------------------------


def answered(client, upstream, key, message: dict, **body) -> dict:
    """A call of alpha-deepseek that the upstream answers with `message`; its response."""
    upstream.post(CHAT_URL, json=chat_answer(message))
    response = post(client, {"model": "alpha-deepseek", **body}, key)
    assert response.status_code == 200, response.content
    return response.json()


def aged(response_id: str, *, days: int) -> None:
    """The kept response, and its items, made `days` days old."""
    when = timezone.now() - timedelta(days=days)
    KeptResponse.objects.filter(response_id=response_id).update(created_at=when)
    ResponseItem.objects.filter(response__response_id=response_id).update(created_at=when)


def test_previous_response_id_sends_the_conversation_before_the_call_upstream(
    client, upstream, deepseek, tara, tara_key
):
    """Each earlier response's input then output, oldest first; not their instructions (OpenAI's rule)."""
    first = answered(
        client,
        upstream,
        tara_key,
        {"content": "Hello, Tara.", "reasoning_content": "A greeting."},
        instructions="Be brief.",
        input="Hi, I am Tara.",
    )
    second = answered(
        client,
        upstream,
        tara_key,
        {"content": "Your name is Tara."},
        previous_response_id=first["id"],
        input="What is my name?",
    )
    assert second["previous_response_id"] == first["id"]

    third = answered(
        client,
        upstream,
        tara_key,
        {"content": "Bye."},
        previous_response_id=second["id"],
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Thanks."}]}],
    )

    assert sent_json(upstream.calls[2])["messages"] == [
        {"role": "user", "content": "Hi, I am Tara."},
        {"role": "assistant", "content": "Hello, Tara.", "reasoning_content": "A greeting."},
        {"role": "user", "content": "What is my name?"},
        {"role": "assistant", "content": "Your name is Tara."},
        {"role": "user", "content": "Thanks."},
    ]
    kept = list(KeptResponse.objects.filter(account=tara).order_by("depth"))
    assert [(k.response_id, k.previous_response_id, k.root_id, k.depth) for k in kept] == [
        (first["id"], "", first["id"], 0),
        (second["id"], first["id"], first["id"], 1),
        (third["id"], second["id"], first["id"], 2),
    ]
    assert kept[1].input == [{"role": "user", "content": "What is my name?"}]
    holds = list(Hold.objects.order_by("id").values_list("amount", flat=True))
    assert holds[2] > holds[1] > holds[0]  # each hold covers the conversation sent before the call
    assert [item.item_id for item in kept[0].items.order_by("position")] == [i["id"] for i in first["output"]]
    assert UsageRecord.objects.filter(status=200).count() == 3
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert ledger_check() == []


def test_a_tool_loop_chained_by_previous_response_id_sends_the_call_before_its_output(
    client, upstream, deepseek, tara, tara_key
):
    """The Agents SDK's chaining: the next call sends only the tool's output."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    first = answered(client, upstream, tara_key, {"content": None, "tool_calls": [call]}, input="Weather?")
    assert [item["type"] for item in first["output"]] == ["function_call"]

    answered(
        client,
        upstream,
        tara_key,
        {"content": "Sunny."},
        previous_response_id=first["id"],
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
    )

    messages = sent_json(upstream.calls[1])["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["id"] == "call_1"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


def test_a_branch_of_a_conversation_is_sent_without_its_siblings(client, upstream, deepseek, tara, tara_key):
    root = answered(client, upstream, tara_key, {"content": "Hello."}, input="Hi.")
    answered(client, upstream, tara_key, {"content": "A."}, previous_response_id=root["id"], input="Say A.")
    b = answered(
        client, upstream, tara_key, {"content": "B."}, previous_response_id=root["id"], input="Say B."
    )

    answered(client, upstream, tara_key, {"content": "C."}, previous_response_id=b["id"], input="Say C.")

    texts = [m["content"] for m in sent_json(upstream.calls[3])["messages"]]
    assert texts == ["Hi.", "Hello.", "Say B.", "B.", "Say C."]


def test_a_streamed_answer_is_kept_and_continued_once_it_completes(
    client, upstream, deepseek, tara, tara_key
):
    stream_answers(
        upstream, chunk({"role": "assistant", "content": "Hello."}), chunk({}, finish="stop", usage=USAGE)
    )
    response = post(client, {"model": "alpha-deepseek", "input": "Hi.", "stream": True}, tara_key)
    completed = last_event(response)["response"]
    assert KeptResponse.objects.get(account=tara).response_id == completed["id"]

    answered(
        client, upstream, tara_key, {"content": "Bye."}, previous_response_id=completed["id"], input="Bye."
    )

    texts = [m["content"] for m in sent_json(upstream.calls[1])["messages"]]
    assert texts == ["Hi.", "Hello.", "Bye."]


def uma_key(chat_group) -> str:
    other = account_create(username="uma", email="uma@example.com", password="uma-password-1")
    account_set_groups(account=other, allowed_groups=[chat_group], current_group=chat_group)
    wallet_top_up(account=other, amount="1.00", reference="fixture")
    return api_key_create(account=other, group=chat_group, label="other")[1]


@pytest.mark.parametrize("case", ["unknown", "store-false", "other-account", "nul"])
def test_a_previous_response_not_kept_for_the_caller_is_a_400_reaching_no_upstream(
    client, upstream, deepseek, tara, tara_key, chat_group, case
):
    first = answered(
        client, upstream, tara_key, {"content": "Hello."}, input="Hi.", store=case != "store-false"
    )
    previous = {"unknown": "resp_unknown", "nul": "resp_\x00"}.get(case, first["id"])
    key = uma_key(chat_group) if case == "other-account" else tara_key

    response = continue_from(client, previous, key)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "previous_response_not_found",
        "previous_response_id",
    )
    assert f"Previous response with id {previous!r} not found" in error["message"]
    assert len(upstream.calls) == 1
    assert UsageRecord.objects.get(status=400).amount == 0
    assert KeptResponse.objects.count() == (0 if case == "store-false" else 1)


@pytest.mark.parametrize("previous", [7, True, [], {"id": "resp_1"}])
def test_a_previous_response_id_not_a_string_is_a_400_naming_it(
    client, upstream, deepseek, tara, tara_key, previous
):
    response = continue_from(client, previous, tara_key)

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "previous_response_id"
    assert len(upstream.calls) == 0


def test_purge_keeps_an_old_conversation_still_continued_and_it_goes_on(
    client, upstream, deepseek, tara, tara_key, settings
):
    """Retention counts from a conversation's last response: its first turns, older than that, are what
    a continuation needs."""
    settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = 30
    first = answered(client, upstream, tara_key, {"content": "Hello."}, input="Hi.")
    second = answered(
        client, upstream, tara_key, {"content": "Yes."}, previous_response_id=first["id"], input="?"
    )
    aged(first["id"], days=31)
    out = StringIO()

    call_command("purge_response_items", stdout=out)
    upstream.post(CHAT_URL, json=chat_answer({"content": "Still here."}))
    response = continue_from(client, second["id"], tara_key)

    assert "Deleted 0 kept response(s) and item(s)" in out.getvalue()
    assert response.status_code == 200, response.content
    assert [m["content"] for m in sent_json(upstream.calls[2])["messages"]] == [
        "Hi.",
        "Hello.",
        "?",
        "Yes.",
        "Again.",
    ]


@pytest.mark.parametrize("batch_size", ["1", "5000"])
def test_purge_deletes_a_conversation_whose_last_response_is_older_than_the_retention(
    client, upstream, deepseek, tara, tara_key, settings, batch_size
):
    """Conversations interleaved: the idle one goes whole, the one still continued stays whole, however
    the purge batches them."""
    settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = 30
    first = answered(client, upstream, tara_key, {"content": "Hello."}, input="Hi.")
    going_on = answered(client, upstream, tara_key, {"content": "Sure."}, input="Another conversation.")
    second = answered(
        client, upstream, tara_key, {"content": "Yes."}, previous_response_id=first["id"], input="?"
    )
    latest = answered(
        client, upstream, tara_key, {"content": "Right."}, previous_response_id=going_on["id"], input="!"
    )
    aged(first["id"], days=32)
    aged(going_on["id"], days=32)
    aged(second["id"], days=31)
    out = StringIO()

    call_command("purge_response_items", "--batch-size", batch_size, stdout=out)
    response = continue_from(client, second["id"], tara_key)

    assert "Deleted 4 kept response(s) and item(s)" in out.getvalue()  # two responses, their messages
    kept_ids = [going_on["id"], latest["id"]]
    assert list(KeptResponse.objects.order_by("id").values_list("response_id", flat=True)) == kept_ids
    assert ResponseItem.objects.filter(response__response_id__in=kept_ids).count() == 2
    assert ResponseItem.objects.count() == 2
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("previous_response_not_found", "previous_response_id")
    assert "kept 30 days after its conversation's last response" in error["message"]
    assert len(upstream.calls) == 4


def test_an_operator_who_keeps_nothing_keeps_no_answer_and_refuses_a_continuation(
    client, upstream, deepseek, tara, tara_key, settings
):
    settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = 0
    answer = answered(client, upstream, tara_key, {"content": "Hello."}, input="Hi.")

    continued = continue_from(client, answer["id"], tara_key)
    referenced = post(client, second_turn(answer["output"]), tara_key)

    assert answer["store"] is False
    assert not KeptResponse.objects.exists() and not ResponseItem.objects.exists()
    assert continued.status_code == 400 and referenced.status_code == 404
    for refused in (continued, referenced):
        assert "this gateway keeps no response" in refused.json()["error"]["message"]
    assert len(upstream.calls) == 1


def test_purge_at_a_retention_of_zero_deletes_what_was_kept_before(
    client, upstream, deepseek, tara_key, settings
):
    answered(client, upstream, tara_key, {"content": "Hello."}, input="Hi.")
    settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = 0

    call_command("purge_response_items", stdout=StringIO())

    assert not KeptResponse.objects.exists() and not ResponseItem.objects.exists()


def nested(depth: int) -> object:
    value: object = "deep"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [KEPT_DEPTH, 700])
def test_an_input_nested_deeper_than_a_response_is_kept_is_a_400_unless_not_stored(
    client, upstream, deepseek, tara, tara_key, depth
):
    """A client's items nest a few levels; what an item carries beyond what the translator reads is
    kept as it came, at any depth the parser allowed."""
    item = {"role": "user", "content": "Hi.", "extra": nested(depth)}

    refused = post(client, {"model": "alpha-deepseek", "input": [item]}, tara_key)
    answer = answered(client, upstream, tara_key, {"content": "Hello."}, input=[item], store=False)

    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input"
    assert answer["store"] is False and not KeptResponse.objects.exists()
    assert len(upstream.calls) == 1


def test_a_shallower_input_is_kept_as_it_came(client, upstream, deepseek, tara, tara_key):
    item = {"role": "user", "content": "Hi.", "extra": nested(KEPT_DEPTH - 3)}

    answered(client, upstream, tara_key, {"content": "Hello."}, input=[item])

    assert KeptResponse.objects.get().input == [item]


@fuzz_settings()
@given(data=st.data(), value=JSON_VALUES)
def test_any_json_in_any_field_of_a_kept_call_is_never_a_server_error(
    client, upstream, deepseek, tara, tara_key, data, value
):
    """The body fuzz's fields (tests/chat/test_fuzz_bodies.py) on a translated model, whose answer is
    kept: the thread is resolved, the body checked and the answer kept whatever the value."""
    upstream.post(CHAT_URL, json=chat_answer({"content": "ok"}))
    base, shape, places = FAMILIES["/v1/responses"]
    body = placed({**base, "model": "alpha-deepseek"}, data.draw(st.sampled_from(places)), value)

    response = post(client, body, tara_key)

    assert response.status_code < 500, response.content[:500]
    assert_in_family_shape(response, shape)
    assert ledger_check() == []


# --- GET and DELETE /v1/responses/{id} ---------------------------------------------------------------


def kept(client, method: str, response_id: str, key: str):
    return getattr(client, method)(f"/v1/responses/{response_id}", headers={"Authorization": f"Bearer {key}"})


def test_a_kept_response_is_retrieved_as_its_caller_got_it(client, upstream, deepseek, tara, tara_key):
    answer = answered(
        client,
        upstream,
        tara_key,
        {"content": "Hello, Tara.", "reasoning_content": "A greeting."},
        instructions="Be brief.",
        input="Hi.",
    )

    response = kept(client, "get", answer["id"], tara_key)

    assert response.status_code == 200
    assert response.json() == answer
    assert [item["type"] for item in answer["output"]] == ["reasoning", "message"]
    assert answer["instructions"] == "Be brief." and answer["usage"]["input_tokens"] == 30


def test_a_streamed_response_is_retrieved_as_it_completed(client, upstream, deepseek, tara, tara_key):
    stream_answers(
        upstream,
        chunk({"role": "assistant", "content": "Hel"}),
        chunk({"content": "lo."}, finish="stop"),
        chunk(usage=USAGE),
    )
    streamed = post(client, {"model": "alpha-deepseek", "input": "Hi.", "stream": True}, tara_key)
    completed = last_event(streamed)["response"]

    response = kept(client, "get", completed["id"], tara_key)

    assert response.status_code == 200
    assert response.json() == completed
    assert response.json()["output"][0]["content"][0]["text"] == "Hello."


def test_a_deleted_response_is_gone_with_its_items_and_cannot_be_continued(
    client, upstream, deepseek, tara, tara_key
):
    first = answered(client, upstream, tara_key, {"content": "Hello."}, input="Hi.")
    second = answered(
        client, upstream, tara_key, {"content": "Yes."}, previous_response_id=first["id"], input="?"
    )

    deleted = kept(client, "delete", first["id"], tara_key)

    assert deleted.status_code == 200
    assert deleted.json() == {"id": first["id"], "object": "response.deleted", "deleted": True}
    assert kept(client, "get", first["id"], tara_key).status_code == 404
    assert kept(client, "delete", first["id"], tara_key).status_code == 404
    assert list(KeptResponse.objects.values_list("response_id", flat=True)) == [second["id"]]
    assert not ResponseItem.objects.filter(item_id=first["output"][0]["id"]).exists()
    again = continue_from(client, second["id"], tara_key)
    assert again.status_code == 400
    assert again.json()["error"]["code"] == "previous_response_not_found"
    assert "continues a response no longer kept" in again.json()["error"]["message"]
    assert len(upstream.calls) == 2


@pytest.mark.parametrize("method", ["get", "delete"])
@pytest.mark.parametrize("case", ["unknown", "store-false", "other-account", "native"])
def test_a_response_not_kept_for_the_callers_account_is_a_404(
    client, upstream, deepseek, chat_model, tara, tara_key, chat_group, method, case
):
    if case == "native":  # OpenAI itself answered: it keeps the response, the gateway does not
        upstream.post(
            f"{OPENAI_BASE}/responses",
            json={
                "id": "resp_at_openai",
                "object": "response",
                "status": "completed",
                "output": [],
                "usage": {"input_tokens": 3, "output_tokens": 1},
            },
        )
        assert post(client, {"model": "alpha-chat", "input": "Hi."}, tara_key).status_code == 200
        response_id = "resp_at_openai"
    else:
        answer = answered(
            client, upstream, tara_key, {"content": "Hello."}, input="Hi.", store=case != "store-false"
        )
        response_id = "resp_unknown" if case == "unknown" else answer["id"]
    key = uma_key(chat_group) if case == "other-account" else tara_key

    response = kept(client, method, response_id, key)

    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "response_id")
    assert f"Response with id {response_id!r} not found" in error["message"]
    assert KeptResponse.objects.count() == (1 if case in ("unknown", "other-account") else 0)


@pytest.mark.parametrize("method", ["get", "delete"])
def test_a_token_that_may_not_call_models_may_not_read_or_delete_responses(
    client, upstream, deepseek, tara, tara_key, method
):
    answer = answered(client, upstream, tara_key, {"content": "Hello."}, input="Hi.")
    _, token = oauth_token_create(account=tara, scopes=["profile:read"], expires_in_seconds=600)
    _, invoking = oauth_token_create(account=tara, scopes=["models:invoke"], expires_in_seconds=600)

    refused = kept(client, method, answer["id"], token)
    allowed = kept(client, method, answer["id"], invoking)

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "insufficient_scope"
    assert allowed.status_code == 200


# --- a model served by OpenAI's Responses API and by a Chat Completions server --------------------

COMPATIBLE_BASE = "https://compatible.test/v1"


@pytest.fixture
def openai_then_compatible(chat_group, openai_upstream, settings):
    """`alpha-mixed`: OpenAI first, which keeps its own answers; an OpenAI-compatible server second,
    whose answers the gateway keeps. Failover crosses them."""
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.0, "max_retries": 1}
    compatible = upstream_make(
        name="compatible-second",
        base_url=COMPATIBLE_BASE,
        api_key_env=KEY_ENV,
        kind="openai-compatible",
        priority=1,  # after OpenAI's 0
    )
    return text_model_make(
        model_id="alpha-mixed",
        group=chat_group,
        upstreams=[openai_upstream, compatible],
        upstream_model="shared-name",
        max_output_tokens=1000,
    )


def openai_overloaded(upstream) -> None:
    upstream.post(f"{OPENAI_BASE}/responses", status=503, json={"error": {"message": "Overloaded"}})


def test_on_a_mixed_model_a_call_naming_what_openai_keeps_goes_to_openai_alone(
    client, upstream, openai_then_compatible, tara, tara_key
):
    """The id and the items are OpenAI's: sent there as they came, never to the server behind it,
    which could not go on from them (nor the gateway for it): OpenAI down, the call fails."""
    upstream.post(f"{OPENAI_BASE}/responses", json=OPENAI_ANSWER)
    body = {
        "model": "alpha-mixed",
        "previous_response_id": "resp_at_openai",
        "input": [{"type": "item_reference", "id": "msg_at_openai"}, {"role": "user", "content": "And?"}],
    }

    answered_by_openai = post(client, body, tara_key)
    upstream.replace(
        "POST", f"{OPENAI_BASE}/responses", status=503, json={"error": {"message": "Overloaded"}}
    )
    openai_down = post(client, body, tara_key)

    assert answered_by_openai.status_code == 200, answered_by_openai.content
    sent = sent_json(upstream.calls[0])
    assert (sent["previous_response_id"], sent["input"]) == (body["previous_response_id"], body["input"])
    assert openai_down.status_code >= 500
    assert {call.request.url for call in upstream.calls} == {f"{OPENAI_BASE}/responses"}
    assert not KeptResponse.objects.exists() and not ResponseItem.objects.exists()


def test_on_a_mixed_model_a_call_continuing_what_the_gateway_keeps_goes_to_the_translated_server(
    client, upstream, openai_then_compatible, tara, tara_key
):
    """OpenAI overloaded, the first turn failed over to the Chat Completions server, whose answer the
    gateway kept: the next turn goes there, with the conversation, though OpenAI is first again."""
    openai_overloaded(upstream)
    upstream.post(f"{COMPATIBLE_BASE}/chat/completions", json=chat_answer({"content": "Hello."}))
    first = post(client, {"model": "alpha-mixed", "input": "Hi."}, tara_key)
    assert first.status_code == 200, first.content
    upstream.replace("POST", f"{OPENAI_BASE}/responses", json=OPENAI_ANSWER)
    upstream.replace("POST", f"{COMPATIBLE_BASE}/chat/completions", json=chat_answer({"content": "Sure."}))

    response = post(
        client,
        {"model": "alpha-mixed", "previous_response_id": first.json()["id"], "input": "Go on."},
        tara_key,
    )

    assert response.status_code == 200, response.content
    assert response.json()["previous_response_id"] == first.json()["id"]
    urls = [call.request.url for call in upstream.calls]
    assert urls == [f"{OPENAI_BASE}/responses", *[f"{COMPATIBLE_BASE}/chat/completions"] * 2]
    assert [m["content"] for m in sent_json(upstream.calls[2])["messages"]] == ["Hi.", "Hello.", "Go on."]
    assert KeptResponse.objects.count() == 2


def test_on_a_mixed_model_a_call_naming_nothing_earlier_goes_to_either(
    client, upstream, openai_then_compatible, tara, tara_key
):
    upstream.post(f"{OPENAI_BASE}/responses", json=OPENAI_ANSWER)

    response = post(client, {"model": "alpha-mixed", "input": "Hi."}, tara_key)

    assert response.status_code == 200, response.content
    assert response.json()["id"] == "resp_from_openai"
    assert not KeptResponse.objects.exists()


def test_on_a_mixed_model_a_deep_body_naming_what_openai_keeps_goes_to_openai(
    client, upstream, openai_then_compatible, tara, tara_key
):
    """The gateway refuses to keep a body nested deeper than KEPT_DEPTH; one OpenAI goes on with is
    not kept here, so it is sent."""
    upstream.post(f"{OPENAI_BASE}/responses", json=OPENAI_ANSWER)
    item = {"role": "user", "content": "Hi.", "extra": nested(KEPT_DEPTH + 10)}

    response = post(
        client, {"model": "alpha-mixed", "previous_response_id": "resp_at_openai", "input": [item]}, tara_key
    )

    assert response.status_code == 200, response.content
    assert [call.request.url for call in upstream.calls] == [f"{OPENAI_BASE}/responses"]
    assert not KeptResponse.objects.exists()


@fuzz_settings()
@given(data=st.data(), value=JSON_VALUES, previous=st.sampled_from([None, "resp_at_openai"]))
def test_any_json_in_any_field_of_a_call_on_a_mixed_model_is_never_a_server_error(
    client, upstream, openai_then_compatible, tara, tara_key, data, value, previous
):
    """The body fuzz's fields on a model served by OpenAI and by a Chat Completions server, naming
    OpenAI's response or none: whichever side the call goes to, a refusal in the family's shape."""
    upstream.post(f"{OPENAI_BASE}/responses", json=OPENAI_ANSWER)
    upstream.post(f"{COMPATIBLE_BASE}/chat/completions", json=chat_answer({"content": "ok"}))
    base, shape, places = FAMILIES["/v1/responses"]
    extra = {} if previous is None else {"previous_response_id": previous}
    body = placed({**base, "model": "alpha-mixed", **extra}, data.draw(st.sampled_from(places)), value)

    response = post(client, body, tara_key)

    assert response.status_code < 500, response.content[:500]
    assert_in_family_shape(response, shape)
    assert ledger_check() == []
