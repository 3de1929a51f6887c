"""Every endpoint a key authenticates, called the same way, for the tests of a key's admission limits
(its networks and its models): one group with image and text models on the offline demo upstream."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile

from tests.factories import image_model_make, text_model_make
from tests.images.conftest import image_bytes

# The models of the group (alpha_group): two image models, two text models.
IMAGE_MODEL, OTHER_IMAGE_MODEL = "alpha-image-2", "alpha-image-mini"
TEXT_MODEL, OTHER_TEXT_MODEL = "alpha-text", "alpha-text-pro"


def admission_models_make(*, group, upstream) -> None:
    """The second image model and both text models beside alpha_model (which the caller makes)."""
    image_model_make(model_id=OTHER_IMAGE_MODEL, group=group, upstreams=[upstream], edits_supported=True)
    text_model_make(model_id=TEXT_MODEL, group=group, upstreams=[upstream])
    text_model_make(model_id=OTHER_TEXT_MODEL, group=group, upstreams=[upstream])


@dataclass(frozen=True)
class Endpoint:
    name: str
    path: str
    family: str  # "image" or "text": which of the group's models it calls
    native: bool = False  # errors in the native shape (/v1/messages and its token counting)
    billed: bool = True

    def call(self, client, key: str, model: str, **extra: Any):
        headers = {"Authorization": f"Bearer {key}", **extra.pop("headers", {})}
        if self.name == "images.edits":
            parts = {
                "model": model,
                "prompt": "make it blue",
                "image": SimpleUploadedFile("a.png", image_bytes(), "image/png"),
            }
            return client.post(self.path, parts, headers=headers, **extra)
        return client.post(
            self.path,
            data=json.dumps(_body(self.name, model)),
            content_type="application/json",
            headers=headers,
            **extra,
        )


def _body(name: str, model: str) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Hello there"}]
    return {
        "images.generations": {"model": model, "prompt": "a red square"},
        "chat.completions": {"model": model, "messages": messages, "max_tokens": 20},
        "responses": {"model": model, "input": "Hello there", "max_output_tokens": 20},
        "messages": {"model": model, "messages": messages, "max_tokens": 20},
        "messages.count_tokens": {"model": model, "messages": messages},
    }[name]


ENDPOINTS = [
    Endpoint("images.generations", "/v1/images/generations", "image"),
    Endpoint("images.edits", "/v1/images/edits", "image"),
    Endpoint("chat.completions", "/v1/chat/completions", "text"),
    Endpoint("responses", "/v1/responses", "text"),
    Endpoint("messages", "/v1/messages", "text", native=True),
    Endpoint("messages.count_tokens", "/v1/messages/count_tokens", "text", native=True, billed=False),
]


def error_of(response, *, native: bool) -> tuple[str, str | None, str]:
    """(type, code, message) of an error answer in the compatible or the native shape, checking the
    shape is the one expected."""
    body = response.json()
    if native:
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        error = body["error"]
        assert set(error) == {"type", "message"}, error
        code = re.match(r"([a-z_]+): ", error["message"])
        return error["type"], code[1] if code else None, error["message"]
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error["type"], error["code"], error["message"]
