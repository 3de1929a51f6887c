"""The JSON parser of every DRF view under /v1."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class GatewayJSONParser(JSONParser):
    """DRF's JSONParser, with a body nested deeper than Python's recursion limit (`[` x 100,000)
    refused as malformed (400 invalid_json) instead of escaping as a RecursionError (500)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("the request body is nested too deeply.") from None
