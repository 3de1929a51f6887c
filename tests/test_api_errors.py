import pytest

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
