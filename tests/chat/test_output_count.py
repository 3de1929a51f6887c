"""The output received from a stream's upstream, as it is counted for a caller who leaves before the
final event (chat/output_count.py, chat/tokenizers.py): the generated strings of each family's
events, whole or in runs as they arrive, counted with o200k_base for OpenAI's models (offline, from
the encoding shipped with the gateway) and by UTF-8 bytes for the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chat.families import ChatCompletionsTracker, MessagesTracker, ResponsesTracker
from chat.output_count import output_tokens_counted
from chat.tokenizers import ENCODINGS_DIR, output_encoder
from tests.chat.test_stream_skim import chat_events, messages_events, responses_events


def _received(tracker_class, events) -> str:
    tracker = tracker_class(usage_asked=True)
    for event in events:
        tracker.received.take(event.raw)
    return tracker.received.text()


def _wire_text(events, pick) -> str:
    """The generated text of `events`, read from their JSON as an SDK reads it."""
    text = ""
    for event in events:
        data = event.data
        if data.strip() == "[DONE]" or not data:
            continue
        text += pick(json.loads(data))
    return text


def test_each_familys_generated_strings_are_what_its_sdk_reads_as_output():
    chat, responses, messages = chat_events(), responses_events(), messages_events()

    def chat_pick(chunk):
        out = ""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            out += (delta.get("content") or "") + (delta.get("reasoning_content") or "")
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                out += (function.get("name") or "") + (function.get("arguments") or "")
        return out

    def responses_pick(event):
        return event["delta"] if event.get("type", "").endswith(".delta") else ""

    def messages_pick(event):
        if event.get("type") == "content_block_start":
            return event["content_block"].get("name", "") + event["content_block"].get("text", "")
        if event.get("type") != "content_block_delta":
            return ""
        delta = event["delta"]
        return delta.get("text", "") + delta.get("partial_json", "") + delta.get("thinking", "")

    assert _received(ChatCompletionsTracker, chat) == _wire_text(chat, chat_pick) != ""
    assert _received(ResponsesTracker, responses) == _wire_text(responses, responses_pick) != ""
    assert _received(MessagesTracker, messages) == _wire_text(messages, messages_pick) != ""


def test_escapes_and_characters_split_across_events_decode_whole():
    tracker = ChatCompletionsTracker(usage_asked=False)
    # "é 🎉 \"q\"\n" with the emoji's surrogate pair split between two chunks, as json.dumps escapes it.
    tracker.received.take(b'data: {"choices":[{"delta":{"content":"\\u00e9 \\ud83c"}}]}\n\n')
    tracker.received.take(b'data: {"choices":[{"delta":{"content":"\\udf89 \\"q\\"\\n"}}]}\n\n')

    assert tracker.received.text() == 'é 🎉 "q"\n'


def test_a_key_inside_a_string_is_not_taken_for_output():
    tracker = ChatCompletionsTracker(usage_asked=False)
    tracker.received.take(b'data: {"choices":[{"delta":{"content":"say \\"content\\":\\"x\\""}}]}\n\n')

    assert tracker.received.text() == 'say "content":"x"'


@pytest.mark.parametrize(
    ("kind", "model", "tokenizer"),
    [
        ("openai", "gpt-4o-mini", True),
        ("openai", "gpt-5", True),
        ("openai", "o3-mini", True),
        ("openai", "gpt-4.1-nano-2025-04-14", True),
        ("openai", "gpt-4-turbo", False),  # cl100k_base: bounded by bytes
        ("openai", "deepseek-chat", False),  # another provider behind an OpenAI-style API
        ("anthropic", "claude-sonnet-4-5", False),
        ("demo", "gpt-4o", False),
    ],
)
def test_only_openais_o200k_models_are_counted_with_a_tokenizer(kind, model, tokenizer):
    assert (output_encoder(upstream_kind=kind, upstream_model=model) is not None) is tokenizer


def test_o200k_counts_tokens_and_the_bound_counts_bytes():
    encode = output_encoder(upstream_kind="openai", upstream_model="gpt-4o")
    text = "Fake reply to: a b c d"

    # "Fake", " reply", " to", ":", " a", " b", " c", " d"
    assert output_tokens_counted(text, encode=encode) == 8
    assert output_tokens_counted("héllo 🎉", encode=None) == len("héllo 🎉".encode()) == 11


def test_the_shipped_encoding_loads_without_network():
    # A fresh interpreter with no proxy reachable and no cache of its own: only the shipped file.
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('no network')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = refuse\n"
        "from chat.tokenizers import output_encoder\n"
        "print(len(output_encoder(upstream_kind='openai', upstream_model='gpt-4o')('hello world')))\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TIKTOKEN_CACHE_DIR"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=False
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
    assert ENCODINGS_DIR.is_dir()
