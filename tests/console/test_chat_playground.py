"""The chat playground: the account's text models, a prompt answered through the gateway's own text
pipeline (streamed for the page's script, a page of its own without it), billed like an API call."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.models import IdempotencyRecord, LedgerEntry, UsageRecord
from tests.factories import text_model_make


@pytest.fixture
def demo_chat(alice, chat_group, demo_upstream):
    alice.allowed_groups.add(chat_group)
    return text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])


def _charges(account) -> list[Decimal]:
    return list(
        LedgerEntry.objects.filter(kind=LedgerEntry.Kind.CHARGE, wallet__account=account).values_list(
            "amount", flat=True
        )
    )


def _fields(client, demo_chat, prompt="Hello there"):
    token = client.get("/console/playground/chat/").context["form"]["form_token"].value()
    return {"model": f"{demo_chat.group_id}:demo-chat", "prompt": prompt, "form_token": token}


def test_it_offers_the_text_models_of_the_accounts_groups(alice_client, demo_chat):
    response = alice_client.get("/console/playground/chat/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "demo-chat — Demo-Chat, ¥2.00 in / ¥8.00 out per million tokens" in html
    assert 'href="/console/playground/chat/"' in alice_client.get("/console/playground/").content.decode()


def test_it_says_so_when_no_text_model_is_available(alice_client, chat_group, demo_upstream):
    text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])  # not alice's group

    response = alice_client.get("/console/playground/chat/")

    assert b"None of your groups offers a text model" in response.content


def test_without_script_it_answers_on_a_page_of_its_own_billed_once(alice_client, alice, demo_chat):
    fields = _fields(alice_client, demo_chat)

    posted = alice_client.post("/console/playground/chat/", fields)

    request_id = posted["X-Request-Id"]
    assert posted.status_code == 302
    assert posted["Location"] == f"/console/playground/chat/result/{request_id}/"
    record = UsageRecord.objects.get(request_id=request_id)
    assert record.credential == f"console:{alice.pk}" and record.endpoint == "chat.completions"
    assert record.amount > 0 and record.input_tokens and record.output_tokens
    page = alice_client.get(posted["Location"]).content.decode()
    assert f"{record.input_tokens} tokens in · {record.output_tokens} out" in page
    assert "charged ¥" in page
    assert request_id in page

    again = alice_client.post("/console/playground/chat/", fields)  # the same form, sent again
    alice_client.get(posted["Location"])  # and a reload

    assert again["Location"] == posted["Location"]
    assert _charges(alice) == [-record.amount]


def test_a_form_whose_charged_call_lost_its_answer_says_so_when_sent_again(alice_client, alice, demo_chat):
    fields = _fields(alice_client, demo_chat)
    posted = alice_client.post("/console/playground/chat/", fields)
    charged = _charges(alice)
    # What the form's key keeps when its call was charged and then failed: a 500, replayed.
    lost = {"error": {"message": "The first request was charged; its answer was lost.", "type": "api_error"}}
    IdempotencyRecord.objects.filter(account=alice, key=f"console-chat:{fields['form_token']}").update(
        response_status=500, response_body=json.dumps(lost).encode()
    )

    again = alice_client.post("/console/playground/chat/", fields)

    assert again.status_code == 500
    page = again.content.decode()
    assert "This form&#x27;s call was made and charged, but its answer could not be shown." in page
    assert "The first request was charged; its answer was lost." in page
    assert posted["X-Request-Id"] in page  # the charged call's request id
    assert len(charged) == 1 and _charges(alice) == charged


def test_the_stream_endpoint_streams_the_answer_then_shows_its_usage(alice_client, alice, demo_chat):
    response = alice_client.post("/console/playground/chat/stream/", _fields(alice_client, demo_chat))

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    events = b"".join(response.streaming_content).decode()
    chunks = [
        json.loads(line[5:])
        for line in events.splitlines()
        if line.startswith("data:") and line.strip() != "data: [DONE]"
    ]
    text = "".join(c["delta"].get("content") or "" for chunk in chunks for c in chunk.get("choices", []))
    assert text
    request_id = response["X-Request-Id"]
    usage = alice_client.get(f"/console/playground/chat/usage/{request_id}/").json()
    record = UsageRecord.objects.get(request_id=request_id)
    assert usage["input_tokens"] == record.input_tokens and usage["output_tokens"] == record.output_tokens
    assert usage["amount"].startswith("¥")
    assert _charges(alice) == [-record.amount]


def test_the_stream_endpoint_refuses_a_model_the_account_may_not_use(alice_client, alice, demo_chat):
    response = alice_client.post(
        "/console/playground/chat/stream/", {"model": "99:demo-chat", "prompt": "hi"}
    )

    assert response.status_code == 400
    assert not UsageRecord.objects.filter(account=alice).exists()


def test_another_accounts_call_usage_is_not_found(alice_client, bob, demo_chat, client):
    posted = alice_client.post("/console/playground/chat/", _fields(alice_client, demo_chat))
    client.logout()
    client.force_login(bob.user)

    assert client.get(f"/console/playground/chat/usage/{posted['X-Request-Id']}/").status_code == 404
    assert client.get(posted["Location"]).status_code in (403, 404)
