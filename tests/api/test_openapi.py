"""GET /v1/openapi.json and its docs page /docs/: a valid OpenAPI 3 document of every /v1 route, with
the three error shapes and the credential headers, served to anyone; the page loads nothing from
outside the gateway."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db

SCHEMA = "/v1/openapi.json"


@pytest.fixture
def document(client):
    response = client.get(SCHEMA)
    assert response.status_code == 200, response.content[:300]
    return json.loads(response.content)


def _routes(patterns, prefix=""):
    """Every route of the URLconf as an OpenAPI path (`<path:model_id>` → `{model_id}`)."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def test_it_serves_a_valid_openapi_3_document_without_a_credential(client):
    response = client.get(SCHEMA)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    document = json.loads(response.content)
    assert document["openapi"].startswith("3.")
    validate_schema(document)  # raises on a document that breaks the OpenAPI 3 specification


def test_it_describes_every_v1_route_of_the_urlconf(document):
    routes = {route for route in _routes(get_resolver().url_patterns) if route.startswith("/v1/")}

    assert routes
    assert routes <= set(document["paths"]), routes - set(document["paths"])
    assert {path for path in document["paths"] if not path.startswith("/v1/")} == set()


def test_it_declares_the_three_credential_headers_and_requires_one_of_them(document):
    schemes = document["components"]["securitySchemes"]

    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert "sk_oauth_" in schemes["bearerAuth"]["description"]  # OAuth tokens go as bearer too
    assert {(s["type"], s.get("in"), s.get("name")) for s in schemes.values() if s["type"] == "apiKey"} == {
        ("apiKey", "header", "x-api-key"),
        ("apiKey", "header", "x-goog-api-key"),
    }
    one_of_three = [{"bearerAuth": []}, {"apiKeyAuth": []}, {"googApiKeyAuth": []}]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            expected = None if path == SCHEMA else one_of_three
            assert operation.get("security") == expected, (method, path)


def _error_refs(operation, status):
    schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
    return {item["$ref"].rsplit("/", 1)[1] for item in schema.get("anyOf", [schema])}


@pytest.mark.parametrize(
    ("path", "method", "shapes"),
    [
        ("/v1/images/generations", "post", {"CompatibleError", "GoogleError"}),
        ("/v1/images/edits", "post", {"CompatibleError", "GoogleError"}),
        ("/v1/chat/completions", "post", {"CompatibleError", "GoogleError"}),
        ("/v1/responses", "post", {"CompatibleError", "GoogleError"}),
        ("/v1/messages", "post", {"NativeError"}),
        ("/v1/messages/count_tokens", "post", {"NativeError"}),
        ("/v1/models", "get", {"CompatibleError", "NativeError"}),
        ("/v1/models/{model_id}", "get", {"CompatibleError", "NativeError"}),
        ("/v1/me", "get", {"CompatibleError"}),
    ],
)
def test_each_endpoint_answers_errors_in_its_shapes(document, path, method, shapes):
    operation = document["paths"][path][method]

    # An upstream's own 4xx about the request passes through in its shape; the gateway's are its own.
    assert _error_refs(operation, 400) == shapes
    assert _error_refs(operation, 401) == shapes - {"GoogleError"}
    for status in (401, 403, 404, 500):
        assert str(status) in operation["responses"]
    assert {"CompatibleError", "NativeError", "GoogleError"} <= set(document["components"]["schemas"])


def test_the_text_bodies_declare_what_the_gateway_reads_and_let_the_rest_through(document):
    schemas = document["components"]["schemas"]

    for name, limits in [
        ("ChatCompletionRequest", {"max_completion_tokens", "max_tokens"}),
        ("ResponsesRequest", {"max_output_tokens"}),
        ("MessagesRequest", {"max_tokens"}),
        ("CountTokensRequest", set()),
    ]:
        schema = schemas[name]
        assert schema["additionalProperties"] is True
        assert schema["required"] == ["model"]
        assert {f for f, s in schema["properties"].items() if s.get("minimum") == 1} == limits
        assert ("stream" in schema["properties"]) is (name != "CountTokensRequest")
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        assert set(document["paths"][path]["post"]["responses"]["200"]["content"]) == {
            "application/json",
            "text/event-stream",
        }


def test_the_image_bodies_are_json_for_generations_and_multipart_for_edits(document):
    generation = document["paths"]["/v1/images/generations"]["post"]["requestBody"]["content"]
    edit = document["paths"]["/v1/images/edits"]["post"]["requestBody"]["content"]

    assert set(generation) == {"application/json"}
    assert generation["application/json"]["examples"]
    assert set(edit) == {"multipart/form-data"}
    schema = document["components"]["schemas"]["ImageEditRequest"]
    assert schema["properties"]["image"]["format"] == "binary"
    assert set(schema["required"]) == {"model", "prompt", "image"}


def test_the_docs_page_renders_from_the_gateways_own_static_files(client):
    response = client.get("/docs/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert SCHEMA in page
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", page, re.IGNORECASE), "an external URL"
    static = re.findall(r"/static/(drf_spectacular_sidecar/[^\"'?]+)", page)
    assert static
    for path in static:
        assert finders.find(path), path
