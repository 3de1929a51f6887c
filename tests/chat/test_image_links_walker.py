"""The walker that finds a caller's image links for a Gemini route (chat/image_links.py) reads any
JSON in any place of the parts it walks: it finds the links it should, and anything else is left
alone or refused as the caller's 400, never an exception of another kind."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.families import CHAT, COUNT_TOKENS, MESSAGES_FAMILY, RESPONSES_FAMILY
from chat.image_links import image_links_inlined
from core.errors import InvalidRequest
from tests.chat.test_fuzz_bodies import JSON_VALUES, placed

# A private address given as an IP literal: refused by the forgery rules before any DNS lookup.
LINK = "http://10.0.0.1/cat.png"

TEMPLATES: dict[str, tuple[Any, dict[str, Any], list[tuple[Any, ...]], str]] = {
    # family: (the family, a body with a link, where the fuzz puts its value, the link's param)
    "chat": (
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": LINK}}]}]},
        [
            ("messages",),
            ("messages", 0),
            ("messages", 0, "role"),
            ("messages", 0, "content"),
            ("messages", 0, "content", 0),
            ("messages", 0, "content", 0, "type"),
            ("messages", 0, "content", 0, "image_url"),
            ("messages", 0, "content", 0, "image_url", "url"),
        ],
        "messages[0].content[0].image_url.url",
    ),
    "responses": (
        RESPONSES_FAMILY,
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": LINK}]}]},
        [
            ("input",),
            ("input", 0),
            ("input", 0, "type"),
            ("input", 0, "content"),
            ("input", 0, "content", 0),
            ("input", 0, "content", 0, "image_url"),
        ],
        "input[0].content[0].image_url",
    ),
    "messages": (
        MESSAGES_FAMILY,
        {
            "messages": [
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": LINK}}]}
            ]
        },
        [
            ("messages",),
            ("messages", 0, "content"),
            ("messages", 0, "content", 0),
            ("messages", 0, "content", 0, "source"),
            ("messages", 0, "content", 0, "source", "type"),
            ("messages", 0, "content", 0, "source", "url"),
        ],
        "messages[0].content[0].source.url",
    ),
}


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_the_walker_finds_the_link_where_each_family_puts_it(name):
    family, body, _, param = TEMPLATES[name]

    with pytest.raises(InvalidRequest) as refused:
        image_links_inlined(body=body, family=family)

    assert refused.value.param == param
    assert image_links_inlined(body=body, family=COUNT_TOKENS if name != "messages" else CHAT) is body


@pytest.mark.parametrize("name", list(TEMPLATES))
@settings(max_examples=60, deadline=None)
@given(data=st.data(), value=JSON_VALUES)
def test_any_json_value_in_a_walked_place_is_left_alone_or_refused_as_the_callers_400(name, data, value):
    family, body, places, _ = TEMPLATES[name]
    body = placed(body, data.draw(st.sampled_from(places)), value)

    try:
        answer = image_links_inlined(body=body, family=family)
    except InvalidRequest as refused:
        assert refused.status == 400 and refused.param
    else:
        assert answer is body  # nothing was a link: the body goes on untouched
