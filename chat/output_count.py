"""The output a stream's upstream has sent so far, for the charge of a caller who leaves before the
final event (docs/text.md, "A caller who leaves mid-stream").

The provider bills what it generated until the gateway closed its connection; the gateway charges the
caller for the generated strings it received: text, tool-call arguments and names, reasoning and
refusal deltas. `ReceivedOutput` keeps them as they arrive, cheaply: a search of each read's raw
bytes, run in the worker's stream loop (api/stream_loop.py), so this module stays pure (no I/O, no
logging, no locks; tests/chat/test_stream_purity.py). They are counted only if the caller leaves:
with the model's public tokenizer where it has one (chat/tokenizers.py), or else by their UTF-8
bytes, an upper bound for any byte-level tokenizer (no token is shorter than one byte).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

# A JSON string's body: runs of anything but a quote, a backslash or a line end, between escapes.
_STRING = rb'"([^"\\\n]*(?:\\.[^"\\\n]*)*)"'

# Keys, outside any string (inside one their quotes would be escaped), whose string values are what
# the model generated, per family.
# Chat completions: `choices[].delta`'s content, reasoning (`reasoning_content` or `reasoning`, as
# compatible providers name it), refusal, and its tool calls' names and arguments.
CHAT_OUTPUT = re.compile(
    rb'"(?:content|reasoning_content|reasoning|refusal|name|arguments)"\s*:\s*' + _STRING
)
# Responses: the `delta` of every `response.*.delta` event (output text, function-call arguments,
# reasoning text and summaries, refusals); no other event has a string `delta`.
RESPONSES_OUTPUT = re.compile(rb'"delta"\s*:\s*' + _STRING)
# Gemini: a candidate part's `text` (thoughts included) and a function call's `name` (its `args`, an
# object rather than a string, are not counted: a caller who leaves mid-call pays for them as the rest).
GEMINI_OUTPUT = re.compile(rb'"(?:text|name)"\s*:\s*' + _STRING)
# Messages: `content_block_delta`'s text, tool input JSON and thinking, and a tool use's name.
MESSAGES_OUTPUT = re.compile(rb'"(?:text|partial_json|thinking|name)"\s*:\s*' + _STRING)


class ReceivedOutput:
    """The generated strings of the events read so far, kept as their JSON string bodies (escaped):
    consecutive bodies joined are one valid body, so a character escaped across two events (a
    surrogate pair) decodes whole."""

    __slots__ = ("_escaped", "_pattern")

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self._pattern = pattern
        self._escaped = bytearray()

    def take(self, raw: bytes) -> None:
        """Note the generated strings in `raw`, whole events as they came from the upstream."""
        for body in self._pattern.findall(raw):
            self._escaped += body

    def text(self) -> str:
        """The strings received, decoded and joined."""
        escaped = bytes(self._escaped)
        try:
            return json.loads(b'"' + escaped + b'"', strict=False)
        except ValueError:  # an escape the upstream got wrong: its bytes, as they are, bound it
            return escaped.decode("utf-8", "replace")


def output_tokens_counted(text: str, *, encode: Callable[[str], Sequence[int]] | None) -> int:
    """`text`'s tokens by `encode` (the model's tokenizer), or, without one, its UTF-8 bytes: an upper
    bound of any byte-level BPE tokenizer's count."""
    if encode is None:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(encode(text))
