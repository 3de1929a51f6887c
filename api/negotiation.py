"""Content negotiation for /v1: every answer is JSON, whatever the caller's Accept header says.

The providers whose SDKs call this API answer JSON (or an event stream the view chooses itself) and
never 406, so the gateway does the same; DRF's default negotiation parsed the Accept header on every
call to pick among renderers of which there is one. Parsers are still chosen by Content-Type."""

from __future__ import annotations

from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation


class JsonOnlyContentNegotiation(DefaultContentNegotiation):
    def select_renderer(self, request: Any, renderers: list[Any], format_suffix: str | None = None) -> Any:
        renderer = renderers[0]
        return renderer, renderer.media_type
