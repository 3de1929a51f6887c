import pytest

from keys.services import api_key_create

pytestmark = pytest.mark.django_db


def test_unknown_v1_routes_answer_json_in_the_compatible_shape(client):
    response = client.get("/v1/no-such-thing")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "route_not_found"
    assert body["error"]["message"].endswith(f"(request id: {response['X-Request-Id']})")


def test_it_echoes_a_sane_request_id_and_replaces_an_insane_one(client):
    assert client.get("/v1/x", headers={"X-Request-Id": "abc-123"})["X-Request-Id"] == "abc-123"
    generated = client.get("/v1/x", headers={"X-Request-Id": "<script>"})["X-Request-Id"]
    assert generated.startswith("req_")


def test_api_requests_skip_the_browser_middleware_and_console_requests_keep_it(client, alice, alpha_model):
    key = api_key_create(account=alice, group=alpha_model.group, label="t")[1]
    client.force_login(alice.user)  # a console session cookie rides along with the API call

    api = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    console = client.get("/console/")

    assert api.status_code == 200
    assert not hasattr(api.wsgi_request, "session")
    assert not hasattr(api.wsgi_request, "_messages")
    assert "Cookie" not in api.get("Vary", "")
    assert "sessionid" not in api.cookies
    assert "X-Frame-Options" not in api
    assert "CSRF_COOKIE" not in api.wsgi_request.META
    # The same client's console page still has its session, user, messages, CSRF cookie and frame policy.
    assert console.status_code == 200
    assert console.wsgi_request.user == alice.user
    assert hasattr(console.wsgi_request, "_messages")
    assert "CSRF_COOKIE" in console.wsgi_request.META
    assert console["X-Frame-Options"] == "DENY"
