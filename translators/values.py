"""Reading any JSON a caller or an upstream sent, as every translator must: a value is used only where
it has the type wanted, and anything else reads as absent (never an exception)."""

from __future__ import annotations

import json
from typing import Any

from translators import TranslationRefused


def obj(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def event_object(data: str) -> dict[str, Any] | None:
    """A stream event's data as the JSON object it should be; None for anything else (not JSON, or
    JSON that is not an object), which a translator skips."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_bytes(value: Any) -> bytes:
    """`value` as compact JSON in UTF-8, for what a translator writes. A string holding half of a
    surrogate pair (an upstream may send one as a `\\udXXX` escape) has no UTF-8: the text then goes
    out with every non-ASCII character escaped, as the same JSON value."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def data_url(value: Any) -> tuple[str, str] | None:
    """A base64 `data:` URL's media type (empty when it names none) and its data; None for anything
    else (not a string, not a `data:` URL, not base64, no data)."""
    if not isinstance(value, str) or not value.startswith("data:"):
        return None
    head, _, data = value.partition(",")
    if ";base64" not in head or not data:
        return None
    return head.removeprefix("data:").split(";")[0], data


def string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def count(value: Any) -> int:
    """A token count as reported: anything but a positive integer is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def text_joined(value: Any, *, param: str, absent: str | None = None) -> str:
    """A string, or the text of a list of text blocks or parts joined by newlines; `absent` for null
    when given. Anything else is refused, naming `param`."""
    if isinstance(value, str):
        return value
    if value is None and absent is not None:
        return absent
    if isinstance(value, list):
        texts = []
        for index, part in enumerate(value):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise TranslationRefused(
                    "Only text can be given here on this model.", param=f"{param}[{index}]"
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise TranslationRefused("Expected a string or a list of text parts.", param=param)


def arguments_parsed(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as an object: a JSON object's text parsed (empty text is `{}`); any other
    text kept whole as `{"arguments": "<text>"}`."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {"arguments": arguments}
        return parsed if isinstance(parsed, dict) else {"arguments": arguments}
    return obj(arguments)


def error_message(status: int, body: bytes) -> str:
    """The message of an upstream's error body in any family's shape (`error.message`, or `error` as a
    string), else the body's start, else the status."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    error = obj(parsed).get("error")
    message = string(obj(error).get("message")) or string(error)
    return message or body.decode("utf-8", "replace")[:1000] or f"The upstream answered {status}."
