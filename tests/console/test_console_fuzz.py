"""Any text in any field of the console's forms, and in its queries: never a 5xx, and the ledger's
invariants kept (a playground call is charged exactly or not at all).

Each example starts from a form that would be accepted and replaces or leaves out some of its fields,
or adds one the page never sends, so that the fuzz reaches past the first refusal."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.factories import text_model_make
from tests.fuzz_values import form_encoded, fuzz_settings, texts

pytestmark = pytest.mark.django_db

# Strings the forms and views give a meaning to, so that the fuzz reaches their branches.
MEANINGFUL = [
    "5.00", "0", "-1", "1e3", "1e400", "9" * 30, "0.000000001", "daily", "monthly", "total", "weekly",
    "alpha-image-2", "demo-chat", "3:demo-chat", "1", "2", "64x64", "auto", "low", "png", "jpeg",
    "10.0.0.0/8", "::1", "ok", "error", "200", "2026-01-01", "2026-13-40", "csv", "save", "reveal",
    "rotate", "https://example.com/hook", "http://127.0.0.1/", "50, 80", "on", "",
]  # fmt: skip
TEXTS = texts(MEANINGFUL)
LIMITS = ["budget", "budget_period", "models", "rpm", "tpm", "allowed_ips"]
# path, a form that would be accepted, the fields the fuzz fills (with the form's token)
FORMS: list[tuple[str, dict[str, str], list[str]]] = [
    ("/console/keys/", {"label": "fuzz", "group": "{group}"}, ["label", "group", "expires_in_days", *LIMITS]),
    ("/console/keys/{key}/limits/", {"rpm": "10"}, LIMITS),
    ("/console/keys/{key}/revoke/", {}, ["confirm"]),
    ("/console/playground/", {"model": "{image_model}", "prompt": "a cat", "n": "1"},
     ["model", "prompt", "n", "size", "quality", "output_format", "background", "choose"]),
    ("/console/playground/chat/", {"model": "{chat_model}", "prompt": "Hello"}, ["model", "prompt"]),
    ("/console/playground/chat/stream/", {"model": "{chat_model}", "prompt": "Hello"}, ["model", "prompt"]),
    ("/console/alerts/", {"balance_floor": "1.00", "percentages": "50, 80"},
     ["action", "balance_floor", "percentages", "webhook_url", "email_enabled"]),
]  # fmt: skip
QUERIES = [
    ("/console/usage/", ["key", "model", "status", "first_day", "last_day", "format", "page"]),
    ("/console/playground/", ["model"]),
    ("/console/", []),
]
FUZZ = fuzz_settings(share=2)
LEFT_OUT = object()


@pytest.fixture
def console(client, alice, alpha_group, alpha_model, chat_group, demo_upstream):
    """Alice signed in, with a key, an image model and a text model; `fill` names their ids."""
    alice.allowed_groups.add(chat_group)
    chat = text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])
    key = api_key_create(account=alice, group=alpha_group)[0]
    client.force_login(alice.user)
    names = {
        "key": key.pk,
        "group": alpha_group.pk,
        "image_model": alpha_model.pk,
        "chat_model": f"{chat.group_id}:demo-chat",
    }

    def fill(text: str) -> str:
        return text.format(**names)

    return client, fill


def field_values(fields: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """For each field: its valid value kept, left out, or any text; plus at times a field of no form."""
    choices = st.sampled_from([None, LEFT_OUT]) | TEXTS  # None: the valid value
    drawn = st.fixed_dictionaries({name: choices for name in [*fields, "form_token"]})
    return st.tuples(drawn, st.dictionaries(TEXTS, TEXTS, max_size=2)).map(
        lambda pair: {**pair[1], **pair[0]}
    )


def form_body(valid: dict[str, str], values: dict[str, Any]) -> dict[str, str]:
    body = dict(valid)
    for name, value in values.items():
        if value is LEFT_OUT:
            body.pop(name, None)
        elif value is not None:
            body[name] = value
    return body


def assert_served(response) -> None:
    assert response.status_code < 500, response.content[:500]
    if response.streaming:
        b"".join(response.streaming_content)


@pytest.mark.parametrize(("path", "valid", "fields"), FORMS, ids=[form[0] for form in FORMS])
@FUZZ
@given(drawn=st.data())
def test_any_text_in_a_console_form_is_answered_without_a_server_error(console, path, valid, fields, drawn):
    client, fill = console
    body = form_body({name: fill(value) for name, value in valid.items()}, drawn.draw(field_values(fields)))

    response = client.post(
        fill(path), data=form_encoded(body.items()), content_type="application/x-www-form-urlencoded"
    )

    assert_served(response)
    assert ledger_check() == []


@pytest.mark.parametrize(("path", "fields"), QUERIES, ids=[query[0] for query in QUERIES])
@FUZZ
@given(drawn=st.data())
def test_any_text_in_a_console_query_is_answered_without_a_server_error(console, path, fields, drawn):
    client, _fill = console
    values = drawn.draw(field_values(fields))
    query = {name: value for name, value in values.items() if isinstance(value, str)}

    response = client.get(f"{path}?{form_encoded(query.items())}")

    assert_served(response)


RESULT_PAGES = [
    "/console/playground/result/",
    "/console/playground/chat/result/",
    "/console/playground/chat/usage/",
]


@pytest.mark.parametrize("page", RESULT_PAGES)
@FUZZ
@given(request_id=TEXTS)
def test_any_text_as_a_result_pages_request_id_is_answered_without_a_server_error(console, page, request_id):
    client, _fill = console

    response = client.get(f"{page}{quote(request_id.encode('utf-8', 'surrogatepass'), safe='')}/")

    assert_served(response)


SIGN_IN_FORMS = [
    ("/accounts/login/", {"username": "alice", "password": "wrong"}, ["username", "password", "next"]),
    ("/accounts/password-reset/", {"email": "alice@example.com"}, ["email"]),
]


@pytest.mark.parametrize(("path", "valid", "fields"), SIGN_IN_FORMS, ids=[form[0] for form in SIGN_IN_FORMS])
@FUZZ
@given(drawn=st.data())
def test_any_text_in_a_sign_in_form_is_answered_without_a_server_error(
    client, alice, path, valid, fields, drawn
):
    body = form_body(valid, drawn.draw(field_values(fields)))

    response = client.post(
        path, data=form_encoded(body.items()), content_type="application/x-www-form-urlencoded"
    )

    assert_served(response)


@FUZZ
@given(uid=TEXTS, token=TEXTS)
def test_any_text_in_a_password_reset_link_is_answered_without_a_server_error(client, alice, uid, token):
    uid_part, token_part = (quote(text.encode("utf-8", "surrogatepass"), safe="") for text in (uid, token))

    response = client.get(f"/accounts/reset/{uid_part}/{token_part}/")

    assert_served(response)
