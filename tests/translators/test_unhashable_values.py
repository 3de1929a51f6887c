"""A JSON object or array where a translator expects a kind's name (a block's `type`, a finish
reason) is an answer or a refusal, never an exception: such values cannot be looked up in a set.
The gateway's fuzz found this 500 on /v1/messages on a Chat Completions upstream."""

from __future__ import annotations

import json

import pytest

from translators import TranslatedCall, TranslationRefused
from translators.chat_via_gemini import ChatViaGemini
from translators.messages_via_chat import MessagesViaChat
from translators.responses_via_chat import ResponsesViaChat

CALL = TranslatedCall("m", "u", "openai-compatible", max_tokens=10, created=0)
ODD = [{"a": 1}, [1], {}]


@pytest.mark.parametrize("kind", ODD)
def test_a_messages_block_whose_type_is_an_object_is_refused(kind):
    body = {"messages": [{"role": "assistant", "content": [{"type": kind}]}]}
    with pytest.raises(TranslationRefused) as refused:
        MessagesViaChat(CALL).request_body(body)
    assert refused.value.param == "messages[0].content[0]"


@pytest.mark.parametrize("kind", ODD)
def test_a_responses_item_or_part_whose_type_is_an_object_is_refused(kind):
    with pytest.raises(TranslationRefused):
        ResponsesViaChat(CALL).request_body({"input": [{"type": kind}]})
    with pytest.raises(TranslationRefused):
        ResponsesViaChat(CALL).request_body({"input": [{"role": "user", "content": [{"type": kind}]}]})


@pytest.mark.parametrize("reason", ODD)
def test_a_gemini_finish_reason_that_is_an_object_reads_as_a_stop(reason):
    step = ChatViaGemini(CALL)
    answer = step.response_body(
        {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]}
    )
    assert answer["choices"][0]["finish_reason"] == "stop"
    raw = step.stream_event(json.dumps({"candidates": [{"finishReason": reason}]})) + step.stream_end()
    assert raw.endswith(b"data: [DONE]\n\n")
