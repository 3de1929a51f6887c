"""Request bodies are validated by pydantic models; this is the one place their refusals become the API's.

Every JSON body of `/v1` is declared as a pydantic model in its app (images/validation.py,
chat/validation.py, api/admin.py), built once at import and run with `body_validate`. The models are strict (a
JSON `"2"` is not an integer, `true` is not one either), read JSON null as absent, and the rules that
depend on the selected model (its sizes, qualities, formats, `n`, output tokens) read that model
from the validation context: data, not code per model.

`validation_error_to_api_error` turns pydantic's first error into a 400 `invalid_request_error`
naming the field in `param` (a nested one as `messages[0].role`) and in the message:
- pydantic's own error types get the API's codes and messages (`_BUILTIN`): a missing field is
  `missing_required_parameter`, a wrong JSON type `invalid_type`, a value out of a declared bound
  `invalid_value`;
- a validator's refusal (`refusal`) is a `PydanticCustomError` whose type is the API's code and
  whose message is written for the caller. A rule across fields is a validator of the later field,
  reading the earlier ones it depends on (`ValidationInfo.data`), so it is named like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from core.errors import MISSING_REQUIRED_PARAMETER, InvalidRequest

Model = TypeVar("Model", bound=BaseModel)

ECHO_LIMIT = 60
# The error types of pydantic itself; any other type is a validator's refusal, named by its API code.
_PYDANTIC_TYPES = frozenset(get_args(ErrorType))

# What a strict type accepts, in the caller's terms (JSON), for pydantic's `*_type` errors.
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "a boolean (true or false)",
    "float_type": "a number",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}


def _missing(name: str, error: ErrorDetails, description: str | None) -> str:
    return f"`{name}` is required: {description}." if description else f"`{name}` is required."


def _type(name: str, error: ErrorDetails, description: str | None) -> str:
    value = error["input"]
    return f"`{name}` must be {_EXPECTED[error['type']]}; got {json_type(value)} {echo(value)}".rstrip() + "."


def _bound(word: str, key: str) -> Callable[[str, ErrorDetails, str | None], str]:
    def message(name: str, error: ErrorDetails, description: str | None) -> str:
        return f"`{name}` must be {word} {error.get('ctx', {})[key]}; got {echo(error['input'])}."

    return message


def _too_long(name: str, error: ErrorDetails, description: str | None) -> str:
    limit = error.get("ctx", {})["max_length"]
    return f"`{name}` must be at most {limit:,} characters; got {len(error['input']):,}."


def _too_short(name: str, error: ErrorDetails, description: str | None) -> str:
    limit = error.get("ctx", {})["min_length"]
    if limit == 1:
        return f"`{name}` must not be empty."
    return f"`{name}` must be at least {limit:,} characters; got {len(error['input']):,}."


def _too_many(name: str, error: ErrorDetails, description: str | None) -> str:
    return f"`{name}` may hold at most {error.get('ctx', {})['max_length']:,} items."


def _pattern(name: str, error: ErrorDetails, description: str | None) -> str:
    return f"`{name}` must match {error.get('ctx', {})['pattern']}; got {echo(error['input'])}."


# pydantic's error types the models use: the API's code, and the message naming the field.
_BUILTIN: dict[str, tuple[str, Callable[[str, ErrorDetails, str | None], str]]] = {
    "missing": (MISSING_REQUIRED_PARAMETER, _missing),
    **{error_type: ("invalid_type", _type) for error_type in _EXPECTED},
    "greater_than_equal": ("invalid_value", _bound("at least", "ge")),
    "less_than_equal": ("invalid_value", _bound("at most", "le")),
    "string_too_long": ("invalid_value", _too_long),
    "string_too_short": ("invalid_value", _too_short),
    "too_long": ("invalid_value", _too_many),
    "string_pattern_mismatch": ("invalid_value", _pattern),
}


class RequestBody(BaseModel):
    """The base of a request body's model: strict JSON types, unknown fields ignored (a body is never
    re-serialised from its model, so they are not lost where the body is forwarded), and JSON null
    read as absent, as the providers' APIs read it (a required field sent as null is missing)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, values: Any) -> Any:
        if isinstance(values, dict) and None in values.values():
            return {name: value for name, value in values.items() if value is not None}
        return values


def context_of(info: ValidationInfo) -> Mapping[str, Any]:
    """A validator's context: what `body_validate` was given (the selected model, the endpoint)."""
    context = info.context
    assert isinstance(context, Mapping), "a model whose rules read the context is validated with one"
    return context


def body_validate(model: type[Model], value: object, *, context: Mapping[str, Any] | None = None) -> Model:
    """`value` validated by `model` (with `context` for its validators); InvalidRequest on a refusal."""
    try:
        return model.model_validate(value, context=context)
    except ValidationError as exc:
        raise validation_error_to_api_error(error=exc, model=model) from None


def validation_error_to_api_error(*, error: ValidationError, model: type[BaseModel]) -> InvalidRequest:
    """The API's refusal for pydantic's first error (fields report in declaration order)."""
    first = error.errors(include_url=False)[0]
    location = first["loc"]
    param = param_of(location) if location else None
    builtin = _BUILTIN.get(first["type"])
    if builtin is not None:
        code, message_for = builtin
        field = model.model_fields.get(str(location[0])) if len(location) == 1 else None
        description = field.description if field is not None else None
        return InvalidRequest(message_for(param or "body", first, description), param=param, code=code)
    if first["type"] not in _PYDANTIC_TYPES:
        # A validator's own refusal (PydanticCustomError): its type is the code, its message is
        # written for the caller.
        return InvalidRequest(first["msg"], param=param, code=first["type"])
    # pydantic's other types (the models' fields are declared so that none reaches them): its words,
    # prefixed with the field.
    cause = (first.get("ctx") or {}).get("error")
    message = str(cause) if isinstance(cause, Exception) else first["msg"]
    return InvalidRequest(
        f"`{param}`: {message}." if param else f"{message}.", param=param, code="invalid_value"
    )


def param_of(location: tuple[int | str, ...]) -> str:
    """A pydantic location as the API's `param`: `messages[0].role`."""
    param = ""
    for part in location:
        param += f"[{part}]" if isinstance(part, int) else (f".{part}" if param else str(part))
    return param


def refusal(code: str, message: str) -> PydanticCustomError:
    """A validator's refusal: `code` is the API's; the message is used as written (without a context
    no placeholder is filled, so braces echoed from the caller's value stay as sent)."""
    return PydanticCustomError(code, message)


def json_type(value: object) -> str:
    """The JSON name of a parsed JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def echo(value: object) -> str:
    """A short, safe rendering of the caller's value for an error message (nothing for containers)."""
    if isinstance(value, dict | list):
        return ""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= ECHO_LIMIT else text[: ECHO_LIMIT - 1] + "…"
