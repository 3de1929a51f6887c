"""The hold's input ceiling (chat.validation.input_ceiling_tokens) on bodies sent to Gemini: an image
part of a turn counts the image allowance whatever its bytes, and no value anywhere else can lower
the count below its own text, nor make the walker fail."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from chat.families import CHAT, GEMINI_FAMILY
from chat.validation import input_ceiling_tokens

IMAGE_TOKENS = 3_000  # GATEWAY_TEXT_IMAGE_TOKENS's default, which the tests' settings keep
# What a parsed body can hold (the parse refuses lone surrogates), with the words of Gemini's images.
TEXTS = st.sampled_from(
    ["contents", "parts", "inlineData", "mimeType", "data", "image/png", "text"]
) | st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=10)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXTS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXTS, children, max_size=4),
    max_leaves=16,
)


def gemini_body(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "What is this?"}, *parts]}], **fields}


def image(data: str, mime_type: str = "image/png") -> dict[str, Any]:
    return {"inlineData": {"mimeType": mime_type, "data": data}}


def text_bytes(value: Any) -> int:
    """The UTF-8 bytes of every string in `value`, keys included: a floor of any ceiling holding it."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, dict):
        return sum(text_bytes(key) + text_bytes(item) for key, item in value.items())
    if isinstance(value, list):
        return sum(text_bytes(item) for item in value)
    return 0


@given(data=st.text(max_size=5_000))
def test_a_turns_image_part_counts_the_allowance_whatever_its_bytes(data):
    without = input_ceiling_tokens(body=gemini_body(), family=GEMINI_FAMILY)

    assert input_ceiling_tokens(body=gemini_body(image(data)), family=GEMINI_FAMILY) == without + IMAGE_TOKENS


def test_inline_data_that_is_not_an_image_counts_its_bytes():
    pdf = gemini_body(image("A" * 50_000, mime_type="application/pdf"))

    assert input_ceiling_tokens(body=pdf, family=GEMINI_FAMILY) > 50_000


def test_the_same_body_in_another_family_is_text_counted_by_its_bytes():
    body = gemini_body(image("A" * 50_000))

    assert input_ceiling_tokens(body=body, family=CHAT) > 50_000
    assert input_ceiling_tokens(body=body) > 50_000


@given(value=JSON_VALUES, where=st.sampled_from(["tools", "systemInstruction", "generationConfig", "turn"]))
def test_no_value_outside_a_turns_image_parts_counts_below_its_text(value, where):
    """Not even an object shaped like an image part, in a tool's schema or a turn's other fields."""
    hidden = json.dumps(value) + "A" * 10_000  # more than an image's allowance
    for shaped in (value, image(hidden), {"parts": [image(hidden)]}, [image(hidden)]):
        if where == "turn":
            body = gemini_body(image("AAAA"))
            body["contents"][0]["extra"] = shaped
        else:
            body = gemini_body(image("AAAA"), **{where: shaped})

        counted = input_ceiling_tokens(body=body, family=GEMINI_FAMILY)

        assert counted >= IMAGE_TOKENS + text_bytes(shaped)


@given(body=JSON_VALUES)
def test_any_json_value_as_a_gemini_body_is_counted(body):
    counted = input_ceiling_tokens(
        body=body if isinstance(body, dict) else {"contents": body}, family=GEMINI_FAMILY
    )

    assert counted >= 0
