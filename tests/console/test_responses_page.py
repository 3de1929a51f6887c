"""Stored responses: the translated `/v1/responses` answers the gateway keeps for the account, listed
with their model and turn, and deleted one at a time or all at once, the account's own only."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from chat.models import KeptResponse, ResponseItem

pytestmark = pytest.mark.django_db


def keep(account, response_id: str, *, previous: KeptResponse | None = None, items: int = 1) -> KeptResponse:
    """A kept response as the pipeline leaves one (chat/response_store.py), with `items` output items."""
    kept = KeptResponse.objects.create(
        account=account,
        response_id=response_id,
        previous_response_id=previous.response_id if previous else "",
        root_id=previous.root_id if previous else response_id,
        depth=previous.depth + 1 if previous else 0,
        input=[{"role": "user", "content": "Hi."}],
        response={"id": response_id, "object": "response", "model": "alpha-deepseek", "output": []},
    )
    for position in range(items):
        item_id = f"msg_{position}_{response_id}"
        ResponseItem.objects.create(
            account=account, response=kept, position=position, item_id=item_id, item={"id": item_id}
        )
    return kept


def test_it_lists_the_accounts_stored_responses_only(alice_client, alice, bob):
    first = keep(alice, "resp_alice_1", items=2)
    keep(alice, "resp_alice_2", previous=first)
    keep(bob, "resp_bob_1")

    response = alice_client.get("/console/responses/")

    assert response.status_code == 200
    rows = [(row.response_id, row.model, row.turn, row.items) for row in response.context["rows"]]
    assert rows == [("resp_alice_2", "alpha-deepseek", 2, 1), ("resp_alice_1", "alpha-deepseek", 1, 2)]
    assert response.context["total"] == 2
    page = response.content.decode()
    assert "resp_alice_2" in page and "resp_bob_1" not in page
    assert "/console/responses/resp_alice_1/delete/" in page


def test_it_says_when_nothing_is_stored(alice_client, alice):
    response = alice_client.get("/console/responses/")

    assert response.status_code == 200
    assert "No response is stored for your account." in response.content.decode()


def test_deleting_a_response_deletes_its_items_and_breaks_nothing_else(alice_client, alice, bob):
    first = keep(alice, "resp_alice_1")
    keep(alice, "resp_alice_2", previous=first)
    keep(bob, "resp_bob_1")

    confirm = alice_client.get("/console/responses/resp_alice_1/delete/")
    response = alice_client.post("/console/responses/resp_alice_1/delete/")

    assert confirm.status_code == 200 and "resp_alice_1" in confirm.content.decode()
    assert "An answer of alpha-deepseek with 1 output item." in " ".join(confirm.content.decode().split())
    assert response.status_code == 302 and response["Location"] == "/console/responses/"
    assert sorted(KeptResponse.objects.values_list("response_id", flat=True)) == [
        "resp_alice_2",
        "resp_bob_1",
    ]
    assert not ResponseItem.objects.filter(item_id="msg_0_resp_alice_1").exists()
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "Deleted the stored response resp_alice_1."
    ]


@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize("response_id", ["resp_bob_1", "resp_none"])
def test_another_accounts_or_no_response_is_a_404(alice_client, alice, bob, method, response_id):
    keep(bob, "resp_bob_1")

    response = getattr(alice_client, method)(f"/console/responses/{response_id}/delete/")

    assert response.status_code == 404
    assert KeptResponse.objects.filter(response_id="resp_bob_1").exists()
    assert ResponseItem.objects.filter(item_id="msg_0_resp_bob_1").exists()


def test_deleting_all_deletes_the_accounts_responses_and_items_only(alice_client, alice, bob):
    first = keep(alice, "resp_alice_1", items=3)
    keep(alice, "resp_alice_2", previous=first)
    ResponseItem.objects.create(account=alice, item_id="msg_before", item={"id": "msg_before"})  # no response
    keep(bob, "resp_bob_1")

    confirm = alice_client.get("/console/responses/delete/")
    response = alice_client.post("/console/responses/delete/")

    assert confirm.status_code == 200
    assert response.status_code == 302
    assert list(KeptResponse.objects.values_list("response_id", flat=True)) == ["resp_bob_1"]
    assert list(ResponseItem.objects.values_list("item_id", flat=True)) == ["msg_0_resp_bob_1"]
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["Deleted 2 stored responses."]


def test_it_says_when_the_gateway_keeps_none(alice_client, alice, settings):
    settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = 0

    response = alice_client.get("/console/responses/")

    assert "This gateway keeps none now." in response.content.decode()


def test_it_says_a_conversation_is_kept_from_its_last_response(alice_client, alice, settings):
    settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS = 30

    response = alice_client.get("/console/responses/")

    assert "Each is kept 30 days after its conversation's last response." in response.content.decode()
