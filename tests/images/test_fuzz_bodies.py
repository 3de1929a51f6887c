"""Any value in any field of an image request: never a 5xx, a refusal in the compatible error shape,
and no money lost (no hold left open, the ledger's invariants kept).

Hypothesis puts arbitrary JSON into each field of a generation's body (and makes the whole body any
JSON value), and arbitrary text and bytes into an edit's form fields and files, streamed and not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.ledger import wallet_top_up
from billing.models import Hold
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.fuzz_values import fuzz_settings, json_values, texts
from tests.images.conftest import image_bytes, mask_bytes

pytestmark = pytest.mark.django_db

FIELDS = [
    "model", "prompt", "n", "size", "quality", "style", "background", "output_format",
    "output_compression", "response_format", "moderation", "input_fidelity", "partial_images", "user",
    "stream", "extra",
]  # fmt: skip
# Strings the validators give a meaning to, so that the fuzz reaches their branches.
MEANINGFUL = [
    "alpha-image-2.5-flare", "1024x1024", "auto", "png", "jpeg", "webp", "url", "b64_json", "vivid",
    "high", "transparent", "true", "false", "1", "2", "0", "-1", "1e3", "",
]  # fmt: skip
TEXTS = texts(MEANINGFUL)
JSON_VALUES = json_values(TEXTS, max_leaves=12)
UPLOADS = st.sampled_from(
    [image_bytes(), image_bytes("JPEG"), image_bytes("WEBP"), image_bytes(size=(1, 1)), mask_bytes(), b""]
) | st.binary(max_size=64)
FUZZ = fuzz_settings()
VALID = {"model": "alpha-image-2.5-flare", "prompt": "a red square"}


@pytest.fixture
def key(alice, alpha_group, streaming_model):
    wallet_top_up(account=alice, amount="1000.00", reference="fuzz")
    return api_key_create(account=alice, group=alpha_group, label="fuzz")[1]


def assert_answered_well(response) -> None:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["type"], str) and error["type"]
        assert isinstance(error["message"], str) and error["message"]
    elif response.streaming:
        stream = b"".join(response.streaming_content)
        assert stream.startswith(b"event: ") or stream.startswith(b"data: "), stream[:200]
    else:
        assert isinstance(response.json()["data"], list)
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert ledger_check() == []


@FUZZ
@given(data=st.data(), value=JSON_VALUES, stream=st.booleans())
def test_any_json_value_in_any_field_of_a_generation_is_never_a_server_error(
    client, key, data, value, stream
):
    body: Any = {**VALID, "stream": stream, data.draw(st.sampled_from(FIELDS)): value}

    response = client.post(
        "/v1/images/generations",
        data=json.dumps(body),  # ensure_ascii: unpaired surrogates go out as \\udXXX escapes
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )

    assert_answered_well(response)


@FUZZ
@given(body=JSON_VALUES)
def test_any_json_value_as_a_generations_whole_body_is_never_a_server_error(client, key, body):
    response = client.post(
        "/v1/images/generations",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )

    assert_answered_well(response)


def multipart(fields: dict[str, list[str]], files: dict[str, list[bytes]]) -> bytes:
    """A multipart/form-data body written by hand, as a client may send it: a field's text in UTF-8
    with any unpaired surrogate as the bytes it would be (not valid UTF-8)."""
    parts = []
    for name, values in fields.items():
        for value in values:
            head = f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            parts.append(head + value.encode("utf-8", "surrogatepass"))
    for name, contents in files.items():
        for index, content in enumerate(contents):
            head = (
                f'Content-Disposition: form-data; name="{name}"; filename="{index}.png"\r\n'
                "Content-Type: image/png\r\n\r\n"
            ).encode()
            parts.append(head + content)
    return (
        b"".join(b"--" + BOUNDARY + b"\r\n" + part + b"\r\n" for part in parts) + b"--" + BOUNDARY + b"--\r\n"
    )


BOUNDARY = b"fuzzboundary7MA4YWxkTrZu0gW"


@FUZZ
@given(
    fields=st.dictionaries(st.sampled_from(FIELDS), st.lists(TEXTS, min_size=1, max_size=2), max_size=4),
    files=st.dictionaries(
        st.sampled_from(["image", "image[]", "mask", "other"]),
        st.lists(UPLOADS, min_size=1, max_size=2),
        max_size=3,
    ),
    stream=st.booleans(),
)
def test_any_text_in_an_edits_fields_and_any_bytes_in_its_files_are_never_a_server_error(
    client, key, fields, files, stream
):
    form = {"model": [VALID["model"]], "prompt": [VALID["prompt"]], "stream": [str(stream).lower()], **fields}

    response = client.post(
        "/v1/images/edits",
        data=multipart(form, files),
        content_type=f"multipart/form-data; boundary={BOUNDARY.decode()}",
        headers={"Authorization": f"Bearer {key}"},
    )

    assert_answered_well(response)
