"""Domain errors (billing, groups, keys, upstreams) reach the caller through api.errors' one mapping:
each class's status, type, code and headers, in the compatible shape and in the native shape of
/v1/messages, and the same status and code on the call's usage record."""

from __future__ import annotations

import math

import pytest

from api.errors import DOMAIN_ERRORS, api_error_for
from api.usage import usage_outcome_for
from billing.models import UsageRecord
from core.errors import DomainError
from keys.services import api_key_create
from tests.api.domain_errors import ANSWERS, domain_error_classes, domain_error_make
from tests.keys.conftest import assert_compatible_error, bearer

pytestmark = pytest.mark.urls("tests.api.domain_error_urls")

NAMES = sorted(cls.__name__ for cls in ANSWERS)


def _answer_of(name: str) -> tuple[int, str, str, str]:
    return next(answer for cls, answer in ANSWERS.items() if cls.__name__ == name)


def _post(client, path: str, key: str, **data):
    return client.post(path, data=data, content_type="application/json", headers=bearer(key))


def _should_retry(status: int) -> bool:
    """The spec: every 4xx but 408 and 429, and 502/504, carry x-should-retry: false."""
    return not ((400 <= status < 500 and status not in (408, 429)) or status in (502, 504))


def _assert_common_headers(response, status: int) -> None:
    assert ("x-should-retry" in response.headers) == (not _should_retry(status))
    if not _should_retry(status):
        assert response.headers["x-should-retry"] == "false"
    if status == 401:
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.fixture
def alice_key(alice, alpha_group, alpha_model) -> str:
    return api_key_create(account=alice, group=alpha_group)[1]


def test_every_domain_error_of_the_domain_apps_has_one_http_answer():
    defined = domain_error_classes()

    assert defined == set(ANSWERS)
    assert set(DOMAIN_ERRORS) == defined


@pytest.mark.parametrize("name", NAMES)
def test_a_domain_error_is_answered_in_the_compatible_shape(client, alice_key, name):
    status, type_, _, code = _answer_of(name)

    response = _post(client, f"/v1/test/domain/{name}", alice_key)

    error = assert_compatible_error(response, status=status, type_=type_, code=code)
    assert error["message"].startswith(f"{name} happened.")
    assert "x-error-code" not in response.headers
    _assert_common_headers(response, status)
    if status in (429, 503):
        assert response.headers["Retry-After"] == "1"  # none given: the least a client must wait
    else:
        assert "Retry-After" not in response.headers
    record = UsageRecord.objects.get(request_id=response.headers["X-Request-Id"])
    assert (record.status, record.error_code, record.amount) == (status, code, 0)


@pytest.mark.parametrize("name", NAMES)
def test_a_domain_error_is_answered_in_the_native_shape_under_messages(client, alice_key, name):
    status, _, native_type, code = _answer_of(name)

    response = _post(client, f"/v1/messages/test/domain/{name}", alice_key)

    assert response.status_code == status
    request_id = response.headers["X-Request-Id"]
    assert response.json() == {
        "type": "error",
        "error": {"type": native_type, "message": f"{code}: {name} happened. (request id: {request_id})"},
    }
    assert response.headers["x-error-code"] == code
    _assert_common_headers(response, status)
    record = UsageRecord.objects.get(request_id=request_id)
    assert (record.status, record.error_code) == (status, code)


@pytest.mark.parametrize("retry_after", [0.2, 2.5, 43200])
@pytest.mark.parametrize("name", ["UsageLimitExceeded", "LimitsUnavailable", "UpstreamsRateLimited"])
def test_retry_after_becomes_the_header_in_whole_seconds_never_zero(client, alice_key, name, retry_after):
    response = _post(client, f"/v1/test/domain/{name}", alice_key, retry_after=retry_after)

    assert response.status_code == _answer_of(name)[0]
    assert response.headers["Retry-After"] == str(max(1, math.ceil(retry_after)))


@pytest.mark.parametrize(
    "path", ["/v1/test/domain/UsageLimitExceeded", "/v1/messages/test/domain/UsageLimitExceeded"]
)
def test_a_final_refusal_names_no_wait_and_tells_the_sdks_not_to_retry(client, alice_key, path):
    """A quota that never resets: a Retry-After would only bring the SDKs' retries back."""
    response = _post(client, path, alice_key, final=True)

    assert response.status_code == 429
    assert "Retry-After" not in response.headers
    assert response.headers["x-should-retry"] == "false"


def test_a_domain_error_outside_drf_is_answered_by_the_middleware(client, db):
    response = client.get("/v1/test/plain-domain/GroupDisabled")

    error = assert_compatible_error(response, status=403, type_="permission_error", code="GROUP_DISABLED")
    assert error["message"].startswith("GroupDisabled happened.")
    assert not UsageRecord.objects.exists()


def test_a_subscription_the_model_is_not_in_names_the_model_param(client, alice_key):
    response = _post(client, "/v1/test/domain/SubscriptionInvalid", alice_key)

    error = assert_compatible_error(response, status=403, type_="billing_error", code="SUBSCRIPTION_INVALID")
    assert error["param"] == "model"


def test_an_unmapped_domain_error_is_a_logged_500_not_a_guess(caplog):
    class Unmapped(DomainError):
        code = "unmapped"

    answered = api_error_for(Unmapped("no table entry"))

    assert (answered.status, answered.code) == (500, "internal_error")
    assert "no HTTP answer for the domain error Unmapped" in caplog.text


def test_a_subclass_of_a_mapped_domain_error_is_answered_as_its_parent():
    parent = next(cls for cls in ANSWERS if cls.__name__ == "InsufficientBalance")
    child = type("WalletEmpty", (parent,), {})

    answered = api_error_for(child("empty"))

    assert (answered.status, answered.type, answered.code) == (403, "billing_error", "INSUFFICIENT_BALANCE")


@pytest.mark.parametrize("name", NAMES)
def test_the_usage_record_outcome_of_a_domain_error_is_its_answers(name):
    status, _, _, code = _answer_of(name)

    assert usage_outcome_for(error=domain_error_make(name, retry_after=None)) == (status, code)
