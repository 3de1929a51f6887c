"""The `anthropic` upstream kind: Anthropic's Messages API.

Messages are POST {base_url}/messages and token counts POST {base_url}/messages/count_tokens, where
the base URL includes the version path (https://api.anthropic.com/v1). The endpoint app's body goes
out as it is; the provider key goes in `x-api-key` (never `Authorization`), with the caller's
`anthropic-version` or else ours, and the caller's `anthropic-beta` when there is one. A token count
is never streamed. Errors come in Anthropic's shape {"type": "error", "error": {"type", "message"}},
an overloaded API answering 529 (retryable, like a 503).
"""

from __future__ import annotations

import re
from dataclasses import replace

from upstreams.providers.base import (
    EVENT_STREAM,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    USER_AGENT,
    Adapter,
    TextReply,
    TextRequest,
    UpstreamError,
)

ANTHROPIC_VERSION = "2023-06-01"
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta")
# A forwarded header value: visible ASCII and inner spaces (what a version date or a beta list holds).
_HEADER_VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")


class AnthropicAdapter(Adapter):
    kind = "anthropic"
    operations = frozenset({MESSAGES, MESSAGES_COUNT_TOKENS})
    TEXT_PATHS = {MESSAGES: "messages", MESSAGES_COUNT_TOKENS: "messages/count_tokens"}

    def serve(self, operation: str, request: TextRequest) -> TextReply:
        """A message (streamed or not) or a token count, with the body the endpoint app made."""
        self.operation_check(operation)
        if operation == MESSAGES_COUNT_TOKENS and request.stream:
            request = replace(request, stream=False)
        headers = {
            "x-api-key": self._api_key(),
            "anthropic-version": ANTHROPIC_VERSION,
            "Content-Type": "application/json",
            "Accept": EVENT_STREAM if request.stream else "application/json",
            "User-Agent": USER_AGENT,
        }
        for name in FORWARDED_HEADERS:
            value = request.headers.get(name)
            if value is None:
                continue
            if not _HEADER_VALUE.fullmatch(value):
                # Not sendable at all (requests refuses it): the caller's request is at fault.
                message = f"The {name} header is not a valid header value."
                raise UpstreamError(
                    message,
                    status=400,
                    retryable=False,
                    body={"error": {"message": message, "type": "invalid_request_error", "param": name}},
                )
            headers[name] = value
        return self._text_exchange(self._url(self.TEXT_PATHS[operation]), request, headers=headers)
