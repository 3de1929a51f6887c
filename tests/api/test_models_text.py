"""GET /v1/models and GET /v1/models/{id} with text models: OpenAI's shapes, and Anthropic's (answers,
pagination, errors) for a caller that sends `anthropic-version`, checked with both official SDKs."""

from __future__ import annotations

import anthropic
import openai
import pytest
from anthropic.types import ModelInfo

from accounts.services import account_create, account_set_groups
from keys.services import api_key_create, oauth_token_create
from tests.factories import image_model_make, text_model_make

pytestmark = pytest.mark.django_db

ANTHROPIC = {"anthropic-version": "2023-06-01"}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def chat_models(chat_group, demo_upstream):
    """Three text models of Demo-Chat (one with dots in its id) and a disabled one."""
    made = {
        model_id: text_model_make(model_id=model_id, group=chat_group, upstreams=[demo_upstream])
        for model_id in ("demo-chat", "demo-claude", "demo-claude-3.5")
    }
    text_model_make(model_id="demo-old", group=chat_group, upstreams=[demo_upstream], enabled=False)
    return made


@pytest.fixture
def dora(alpha_group, chat_group):
    """An account allowed in Alpha-Image (current) and Demo-Chat."""
    account = account_create(username="dora", email="dora@example.com", password="dora-password-1")
    account_set_groups(account=account, allowed_groups=[alpha_group, chat_group], current_group=alpha_group)
    return account


@pytest.fixture
def chat_key(dora, chat_group, chat_models) -> str:
    _, secret = api_key_create(account=dora, group=chat_group, label="chat")
    return secret


@pytest.fixture
def dora_token(dora, alpha_model, chat_models) -> str:
    _, secret = oauth_token_create(account=dora, scopes=["models:invoke"], expires_in_seconds=3600)
    return secret


def rfc3339(model) -> str:
    return model.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the OpenAI shapes --------------------------------------------------------------------------------


def test_it_lists_the_groups_enabled_text_models(client, chat_key, chat_models):
    response = client.get("/v1/models", headers=bearer(chat_key))

    assert response.status_code == 200
    model = chat_models["demo-chat"]
    assert response.json()["data"][0] == {
        "id": "demo-chat",
        "object": "model",
        "created": int(model.created_at.timestamp()),
        "owned_by": "Demo-Chat",
    }
    assert [item["id"] for item in response.json()["data"]] == ["demo-chat", "demo-claude", "demo-claude-3.5"]


def test_it_lists_a_groups_image_and_text_models_together_by_id(client, dora, chat_group, demo_upstream):
    text_model_make(model_id="b-text", group=chat_group, upstreams=[demo_upstream])
    image_model_make(model_id="a-image", group=chat_group, upstreams=[demo_upstream])
    image_model_make(model_id="c-image", group=chat_group, upstreams=[demo_upstream])
    _, secret = api_key_create(account=dora, group=chat_group, label="")

    response = client.get("/v1/models", headers=bearer(secret))

    assert [item["id"] for item in response.json()["data"]] == ["a-image", "b-text", "c-image"]


def test_it_lists_text_models_of_other_groups_by_group_prefix_for_groups_all(client, dora_token):
    response = client.get("/v1/models?groups=all", headers=bearer(dora_token))

    assert [(item["id"], item["group"]["id"]) for item in response.json()["data"]] == [
        ("1:alpha-image-2", 1),
        ("3:demo-chat", 3),
        ("3:demo-claude", 3),
        ("3:demo-claude-3.5", 3),
    ]


def test_it_answers_one_model_in_the_openai_shape(client, chat_key, chat_models):
    response = client.get("/v1/models/demo-claude-3.5", headers=bearer(chat_key))

    assert response.status_code == 200
    assert response.json() == {
        "id": "demo-claude-3.5",
        "object": "model",
        "created": int(chat_models["demo-claude-3.5"].created_at.timestamp()),
        "owned_by": "Demo-Chat",
    }


def test_it_answers_a_model_by_its_group_prefixed_id(client, dora_token):
    prefixed = client.get("/v1/models/3:demo-claude-3.5", headers=bearer(dora_token))
    plain = client.get("/v1/models/alpha-image-2", headers=bearer(dora_token))

    assert prefixed.status_code == 200 and prefixed.json()["id"] == "3:demo-claude-3.5"
    assert plain.status_code == 200 and plain.json()["owned_by"] == "Alpha-Image"


@pytest.mark.parametrize("model_id", ["nope", "demo-old", "alpha-image-2", "1:alpha-image-2", "3:demo-chat"])
def test_a_model_it_may_not_use_is_model_not_found_in_the_compatible_shape(
    client, chat_key, alpha_model, model_id
):
    # Unknown, disabled, another group's, and a prefix a manual key cannot use.
    response = client.get(f"/v1/models/{model_id}", headers=bearer(chat_key))

    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "model_not_found",
        "model",
    )
    assert model_id in error["message"]


# --- the Anthropic shapes -----------------------------------------------------------------------------


def test_it_lists_in_anthropics_shape_for_a_caller_that_sends_anthropic_version(
    client, chat_key, chat_models
):
    response = client.get("/v1/models", headers={**bearer(chat_key), **ANTHROPIC})

    assert response.status_code == 200
    body = response.json()
    assert body == {
        "data": [
            {
                "type": "model",
                "id": model_id,
                "display_name": model_id,
                "created_at": rfc3339(chat_models[model_id]),
                "lifecycle": "active",
            }
            for model_id in ("demo-chat", "demo-claude", "demo-claude-3.5")
        ],
        "has_more": False,
        "first_id": "demo-chat",
        "last_id": "demo-claude-3.5",
    }
    for item in body["data"]:
        assert ModelInfo.model_validate(item).id == item["id"]


def test_an_empty_anthropic_list_has_no_first_or_last_id(client, dora, chat_group):
    _, secret = api_key_create(account=dora, group=chat_group, label="")

    response = client.get("/v1/models", headers={**bearer(secret), **ANTHROPIC})

    assert response.json() == {"data": [], "has_more": False, "first_id": None, "last_id": None}


@pytest.mark.parametrize(
    ("query", "ids", "has_more"),
    [
        ("limit=1", ["demo-chat"], True),
        ("limit=2", ["demo-chat", "demo-claude"], True),
        ("limit=3", ["demo-chat", "demo-claude", "demo-claude-3.5"], False),
        ("limit=1000", ["demo-chat", "demo-claude", "demo-claude-3.5"], False),
        ("limit=1&after_id=demo-chat", ["demo-claude"], True),
        ("after_id=demo-chat", ["demo-claude", "demo-claude-3.5"], False),
        ("after_id=demo-claude-3.5", [], False),
        ("limit=1&before_id=demo-claude-3.5", ["demo-claude"], True),
        ("limit=2&before_id=demo-claude-3.5", ["demo-chat", "demo-claude"], False),
        ("before_id=demo-chat", [], False),
    ],
)
def test_it_pages_the_anthropic_list(client, chat_key, query, ids, has_more):
    response = client.get(f"/v1/models?{query}", headers={**bearer(chat_key), **ANTHROPIC})

    assert response.status_code == 200, response.content
    body = response.json()
    assert [item["id"] for item in body["data"]] == ids
    assert body["has_more"] is has_more
    assert (body["first_id"], body["last_id"]) == ((ids[0], ids[-1]) if ids else (None, None))


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=0", "limit must be a whole number from 1 to 1000, got '0'"),
        ("limit=1001", "limit must be a whole number from 1 to 1000"),
        ("limit=ten", "limit must be a whole number from 1 to 1000, got 'ten'"),
        ("after_id=nope", "after_id 'nope' is not the id of a model you may use"),
        ("before_id=demo-old", "before_id 'demo-old' is not the id of a model you may use"),
        ("after_id=demo-chat&before_id=demo-claude", "Send after_id or before_id, not both."),
    ],
)
def test_it_refuses_bad_anthropic_page_parameters_in_anthropics_error_shape(client, chat_key, query, message):
    response = client.get(f"/v1/models?{query}", headers={**bearer(chat_key), **ANTHROPIC})

    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "invalid_request_error"
    assert message in body["error"]["message"]


def test_the_openai_list_ignores_anthropics_page_parameters(client, chat_key):
    response = client.get("/v1/models?limit=1&after_id=nope", headers=bearer(chat_key))

    assert response.status_code == 200
    assert len(response.json()["data"]) == 3


def test_it_answers_one_model_in_anthropics_shape(client, chat_key, chat_models):
    response = client.get("/v1/models/demo-claude", headers={**bearer(chat_key), **ANTHROPIC})

    assert response.status_code == 200
    assert response.json() == {
        "type": "model",
        "id": "demo-claude",
        "display_name": "demo-claude",
        "created_at": rfc3339(chat_models["demo-claude"]),
        "lifecycle": "active",
    }


def test_a_model_it_may_not_use_is_not_found_in_anthropics_error_shape(client, chat_key, alpha_model):
    response = client.get("/v1/models/alpha-image-2", headers={**bearer(chat_key), **ANTHROPIC})

    assert response.status_code == 404
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "not_found_error"
    assert body["error"]["message"].startswith("model_not_found: The model 'alpha-image-2' does not exist")
    assert response["x-error-code"] == "model_not_found"


def test_authentication_errors_follow_the_shape_asked_for(client, chat_models):
    anthropic_shaped = client.get("/v1/models", headers={"x-api-key": "sk-unknown", **ANTHROPIC})
    openai_shaped = client.get("/v1/models/demo-chat", headers={"x-api-key": "sk-unknown"})

    assert anthropic_shaped.status_code == openai_shaped.status_code == 401
    assert anthropic_shaped.json()["error"]["type"] == "authentication_error"
    assert anthropic_shaped.json()["type"] == "error"
    assert set(openai_shaped.json()["error"]) == {"message", "type", "param", "code"}


# --- the official SDKs against a live server ------------------------------------------------------------


@pytest.fixture
def live_chat_key(live_server, transactional_db, chat_key) -> tuple[str, str]:
    return live_server.url, chat_key


def test_the_anthropic_sdk_lists_pages_and_retrieves_models(live_chat_key, chat_models):
    base_url, secret = live_chat_key
    client = anthropic.Anthropic(base_url=base_url, api_key=secret, max_retries=0)

    first = client.models.list(limit=2)
    every = [model.id for model in client.models.list(limit=1)]  # follows after_id page by page
    backwards = client.models.list(limit=1, before_id="demo-claude-3.5")
    retrieved = client.models.retrieve("demo-claude-3.5")

    assert [model.id for model in first.data] == ["demo-chat", "demo-claude"] and first.has_more
    assert every == ["demo-chat", "demo-claude", "demo-claude-3.5"]
    assert [model.id for model in backwards.data] == ["demo-claude"] and backwards.has_more
    assert [model.id for model in backwards.get_next_page().data] == ["demo-chat"]
    assert retrieved.type == "model" and retrieved.display_name == "demo-claude-3.5"
    assert retrieved.created_at == chat_models["demo-claude-3.5"].created_at.replace(microsecond=0)
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.models.retrieve("nope")
    assert missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=base_url, api_key="sk-unknown", max_retries=0).models.list()


def test_the_openai_sdk_lists_and_retrieves_text_models(live_chat_key):
    base_url, secret = live_chat_key
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=secret, max_retries=0)

    assert [model.id for model in client.models.list()] == ["demo-chat", "demo-claude", "demo-claude-3.5"]
    assert client.models.retrieve("demo-claude-3.5").owned_by == "Demo-Chat"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("nope")
    assert missing.value.code == "model_not_found"
