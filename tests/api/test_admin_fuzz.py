"""Any JSON value in any field of the provisioning API's bodies, any text in its query: never a 5xx,
a refusal in the compatible error shape, and the ledger's invariants kept (a top-up is written whole
or not at all)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounts.services import account_create, account_set_groups
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.fuzz_values import fuzz_settings, json_values, texts

pytestmark = pytest.mark.django_db

# Strings the validators give a meaning to, so that the fuzz reaches their branches.
MEANINGFUL = [
    "Alpha-Image", "Beta", "alice", "a@example.com", "5.00", "0", "-1", "1e3", "0.000000001",
    "daily", "monthly", "total", "10.0.0.0/8", "::1", "2026-01-01T00:00:00", "2026-13-40", "alpha-image-2",
    "1e400", "9" * 30, "", "http://127.0.0.1/h",
]  # fmt: skip
TEXTS = texts(MEANINGFUL)
JSON_VALUES = json_values(TEXTS, max_leaves=12)
LIMITS = ["budget", "budget_period", "models", "rpm", "tpm", "allowed_ips"]
# method, path (with {account} and {key}), a valid body, the fields the fuzz fills
BODIES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("post", "/v1/admin/accounts", {"username": "newcomer", "groups": ["Alpha-Image"]},
     ["username", "email", "groups", "current_group", "extra"]),
    ("post", "/v1/admin/accounts/{account}/keys", {"group": "Alpha-Image"},
     ["group", "label", "expires_at", *LIMITS]),
    ("patch", "/v1/admin/keys/{key}", {}, [*LIMITS, "label"]),
    ("post", "/v1/admin/accounts/{account}/topups", {"amount": "1.00", "note": "fuzz"},
     ["amount", "note", "reference"]),
    ("patch", "/v1/admin/accounts/{account}/alerts", {},
     ["balance_floor", "percentages", "webhook_url", "email_enabled"]),
]  # fmt: skip
NO_BODY = object()
FUZZ = fuzz_settings()


@pytest.fixture
def admin(client, staff, alpha_group):
    """Sends as staff; the account and the key the paths name."""
    staff.account.allowed_groups.add(alpha_group)
    staff_key = api_key_create(account=staff.account, group=alpha_group)[1]
    account = account_create(username="fuzzed", email="fuzzed@example.com", password="fuzzed-password-1")
    account_set_groups(account=account, allowed_groups=[alpha_group], current_group=alpha_group)
    api_key = api_key_create(account=account, group=alpha_group)[0]

    def send(method: str, path: str, body: Any = NO_BODY, query: dict[str, str] | None = None):
        path = path.format(account=account.pk, key=api_key.pk)
        headers = {"Authorization": f"Bearer {staff_key}"}
        if body is NO_BODY:  # a query written by hand: an unpaired surrogate goes as its bytes
            text = "&".join(
                f"{name}={quote(value.encode('utf-8', 'surrogatepass'))}"
                for name, value in (query or {}).items()
            )
            return getattr(client, method)(f"{path}?{text}", headers=headers)
        return getattr(client, method)(
            path, data=json.dumps(body), content_type="application/json", headers=headers
        )

    return send


def assert_answered_well(response) -> None:
    assert response.status_code < 500, response.content[:500]
    payload = response.json()
    if response.status_code >= 400:
        error = payload["error"]
        assert isinstance(error["type"], str) and error["type"]
        assert isinstance(error["message"], str) and error["message"]
    assert ledger_check() == []


@pytest.mark.parametrize(
    ("method", "path", "valid", "fields"), BODIES, ids=[f"{m} {p}" for m, p, _, _ in BODIES]
)
@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_any_json_value_in_any_field_is_never_a_server_error(admin, method, path, valid, fields, data, value):
    body = {**valid, data.draw(st.sampled_from(fields)): value}

    assert_answered_well(admin(method, path, body))


@pytest.mark.parametrize(
    ("method", "path", "valid", "fields"), BODIES, ids=[f"{m} {p}" for m, p, _, _ in BODIES]
)
@FUZZ
@given(body=JSON_VALUES)
def test_any_json_value_as_the_whole_body_is_never_a_server_error(admin, method, path, valid, fields, body):
    assert_answered_well(admin(method, path, body))


@FUZZ
@given(
    query=st.dictionaries(st.sampled_from(["from", "to", "limit", "before_id", "other"]), TEXTS, max_size=4)
)
def test_any_text_in_the_usage_query_is_never_a_server_error(admin, query):
    assert_answered_well(admin("get", "/v1/admin/accounts/{account}/usage", query=query))
