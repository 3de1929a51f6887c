"""GET /v1/models for manual keys and OAuth tokens, with and without `?groups=all`."""

from __future__ import annotations

import pytest

from accounts.services import account_set_groups
from images.access import image_model_resolve
from keys.authentication import credential_verify
from tests.keys.conftest import bearer, model_make

pytestmark = pytest.mark.django_db

INVOKE = "models:invoke"


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["data"]]


def test_it_lists_the_bound_groups_models_in_the_openai_list_shape(client, alice_key, alpha_model):
    response = client.get("/v1/models", headers=bearer(alice_key))

    assert response.status_code == 200
    assert response.json() == {
        "object": "list",
        "data": [
            {
                "id": "alpha-image-2",
                "object": "model",
                "created": int(alpha_model.created_at.timestamp()),
                "owned_by": "Alpha-Image",
            }
        ],
    }


def test_it_leaves_out_disabled_models(client, alice_key, alpha_group, demo_upstream):
    model_make(model_id="alpha-image-old", group=alpha_group, upstream=demo_upstream, enabled=False)

    assert ids(client.get("/v1/models", headers=bearer(alice_key))) == ["alpha-image-2"]


def test_it_ignores_groups_all_for_a_manual_key(client, carol, alpha_group, gamma_model, key_for):
    secret = key_for(carol, alpha_group)

    response = client.get("/v1/models?groups=all", headers=bearer(secret))

    assert ids(response) == []  # Alpha has no model in this test; Gamma's are not listed
    assert response.json()["object"] == "list"


def test_it_lists_the_current_groups_models_for_an_oauth_token(
    client, carol, alpha_model, gamma_model, token_for
):
    response = client.get("/v1/models", headers=bearer(token_for(carol, ["profile:read"])))

    assert ids(response) == ["alpha-image-2"]
    assert "group" not in response.json()["data"][0]


def test_it_lists_every_allowed_group_with_the_id_that_selects_it_for_groups_all(
    client, carol, alpha_model, beta_model, gamma_model, token_for
):
    response = client.get("/v1/models?groups=all", headers=bearer(token_for(carol, [INVOKE])))

    data = response.json()["data"]
    # Beta-API is subscription-billed: no `<group_id>:<model>` reaches it from Alpha, so its model is
    # listed by its plain id and marked as not selectable per request.
    assert [(item["id"], item["group"], item["selectable"]) for item in data] == [
        ("1:alpha-image-2", {"id": 1, "name": "Alpha-Image"}, True),
        ("beta-imagine-image", {"id": 2, "name": "Beta-API"}, False),
        ("3:gamma-image-1", {"id": 3, "name": "Gamma-Image"}, True),
    ]
    assert all(item["object"] == "model" and isinstance(item["created"], int) for item in data)


def test_every_selectable_id_listed_for_groups_all_selects_its_model(
    client, carol, alpha_model, beta_model, gamma_model, token_for
):
    secret = token_for(carol, [INVOKE])
    credential = credential_verify(secret=secret)
    data = client.get("/v1/models?groups=all", headers=bearer(secret)).json()["data"]
    for item in data:
        if not item["selectable"]:
            continue
        resolved = image_model_resolve(
            credential=credential, requested_model=item["id"], operation="generate"
        )
        assert resolved.group.pk == item["group"]["id"]
    assert [item["id"] for item in data if not item["selectable"]] == ["beta-imagine-image"]


def test_a_model_that_cannot_be_selected_has_no_detail_under_its_listed_id(
    client, carol, alpha_model, beta_model, token_for
):
    secret = token_for(carol, [INVOKE])

    assert client.get("/v1/models/beta-imagine-image", headers=bearer(secret)).status_code == 404
    assert client.get("/v1/models/2:beta-imagine-image", headers=bearer(secret)).status_code == 404


def test_it_lists_the_current_subscription_group_by_plain_ids_for_groups_all(
    client, carol, alpha_group, beta_group, gamma_group, alpha_model, beta_model, gamma_model, token_for
):
    account_set_groups(
        account=carol, allowed_groups=[alpha_group, beta_group, gamma_group], current_group=beta_group
    )

    response = client.get("/v1/models?groups=all", headers=bearer(token_for(carol, [INVOKE])))

    # From a subscription group no override is possible: its own models by plain id, the other
    # allowed groups' listed but not selectable.
    assert [(item["id"], item["group"]["id"], item["selectable"]) for item in response.json()["data"]] == [
        ("alpha-image-2", 1, False),
        ("beta-imagine-image", 2, True),
        ("gamma-image-1", 3, False),
    ]


def test_the_anthropic_shaped_list_leaves_out_what_cannot_be_selected(
    client, carol, alpha_model, beta_model, gamma_model, token_for
):
    response = client.get(
        "/v1/models?groups=all",
        headers={**bearer(token_for(carol, [INVOKE])), "anthropic-version": "2023-06-01"},
    )

    assert [item["id"] for item in response.json()["data"]] == ["1:alpha-image-2", "3:gamma-image-1"]


def test_it_leaves_inactive_groups_out_of_groups_all(client, carol, gamma_group, gamma_model, token_for):
    gamma_group.status = "disabled"
    gamma_group.save(update_fields=["status"])

    assert ids(client.get("/v1/models?groups=all", headers=bearer(token_for(carol, [INVOKE])))) == []


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "*/*", "application/json"])
def test_it_answers_json_whatever_the_accept_header_asks_for(client, alice_key, alpha_model, accept):
    response = client.get("/v1/models", headers={**bearer(alice_key), "Accept": accept})

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert ids(response) == ["alpha-image-2"]


def test_its_errors_are_json_whatever_the_accept_header_asks_for(client, alpha_model):
    response = client.get("/v1/models", headers={"Authorization": "Bearer sk-unknown", "Accept": "text/html"})

    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
