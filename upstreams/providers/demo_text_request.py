"""What a text request asks of the demo upstream, read as the real APIs read it.

`DemoAsk.read` refuses what OpenAI and Anthropic refuse (a chat completion without `messages`, a
response without `input`, a message without `max_tokens`, tools or formats of the wrong type, a forced
tool that is not among the tools) with the message of a 400, so that the gateway passes the refusal
on and charges nothing. Otherwise it says what the answer must be: a call of which function tool, JSON
of which schema, text cut at which stop sequences, how many choices.

Any JSON value may stand anywhere in a body: every read checks the type it needs and treats anything
else as absent or refuses it, and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from upstreams.providers.base import CHAT_COMPLETIONS, MESSAGES, MESSAGES_COUNT_TOKENS, RESPONSES

CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Anthropic's messages: the SDK's MessageParam takes a system message too (Claude Code sends one).
MESSAGE_ROLES = frozenset({"user", "assistant", "system"})
MAX_CHOICES = 8  # `n` above this is refused (OpenAI's own bound is 128; the demo keeps answers small)
MAX_STOP_SEQUENCES = 4  # OpenAI's bound for `stop`
# A schema asking for more items or characters than this is refused: the demo makes its arguments in
# memory, and a schema must not be able to ask it for gigabytes.
MAX_SCHEMA_MINIMUM = 100
SCHEMA_MINIMUM_KEYS = frozenset({"minItems", "minLength", "minProperties", "minContains"})
TOOL_RESULT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})


class Refusal(Exception):
    """The request is one the real API answers with a 400: its message and the field it names."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class Tool:
    """A function tool the answer may call: its name and the JSON schema of its arguments."""

    name: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class DemoAsk:
    """What the answer must be."""

    messages: list[Any]
    instructions: Any
    tools: list[Tool] = field(default_factory=list)
    call: Tool | None = None  # the tool the answer calls, when it calls one
    after_tool_result: bool = False  # the conversation's last turn is a tool's result
    json_schema: dict[str, Any] | None = None  # the answer is JSON valid against it ({} for any object)
    stop: tuple[str, ...] = ()
    choices: int = 1

    @classmethod
    def read(cls, operation: str, body: dict[str, Any]) -> DemoAsk:
        """Raises Refusal for a request the real API refuses."""
        if operation == RESPONSES:
            messages, instructions = _responses_input(body), body.get("instructions")
        else:
            messages = _messages(operation, body)
            instructions = body.get("system") if operation in (MESSAGES, MESSAGES_COUNT_TOKENS) else None
        if operation == MESSAGES:
            _require_max_tokens(body)
        tools = _tools(operation, body.get("tools"))
        forced, tool_choice_none = _tool_choice(operation, body.get("tool_choice"), tools)
        after_tool_result = _ends_with_tool_result(operation, messages)
        call = forced
        if call is None and not tool_choice_none and not after_tool_result:
            call = _named_in(_last_user_text(messages), tools)
        if operation == MESSAGES_COUNT_TOKENS:
            call = None  # counted, not answered
        return cls(
            messages=messages,
            instructions=instructions,
            tools=tools,
            call=call,
            after_tool_result=after_tool_result,
            json_schema=_output_schema(operation, body),
            stop=_stop(operation, body),
            choices=_choices(operation, body),
        )


# --- the conversation ------------------------------------------------------------------------------


def _messages(operation: str, body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    if messages is None:
        raise Refusal(_missing(operation, "messages"), "messages")
    if not isinstance(messages, list) or not messages:
        raise Refusal("`messages` must be a non-empty array of message objects.", "messages")
    roles = CHAT_ROLES if operation == CHAT_COMPLETIONS else MESSAGE_ROLES
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in roles:
            raise Refusal(
                f"`messages[{index}]` must be an object whose `role` is one of {', '.join(sorted(roles))}.",
                f"messages[{index}].role",
            )
    return messages


def _responses_input(body: dict[str, Any]) -> list[Any]:
    items = body.get("input")
    if items is None:
        raise Refusal(_missing(RESPONSES, "input"), "input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise Refusal("`input` must be a string or an array of input items.", "input")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise Refusal(f"`input[{index}]` must be an object.", f"input[{index}]")
    return items


def _require_max_tokens(body: dict[str, Any]) -> None:
    value = body.get("max_tokens")
    if value is None:
        raise Refusal(_missing(MESSAGES, "max_tokens"), "max_tokens")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Refusal("max_tokens: must be a positive integer", "max_tokens")


def _missing(operation: str, name: str) -> str:
    if operation in (MESSAGES, MESSAGES_COUNT_TOKENS):
        return f"{name}: Field required"  # Anthropic's wording
    return f"Missing required parameter: '{name}'."  # OpenAI's


def _ends_with_tool_result(operation: str, messages: list[Any]) -> bool:
    last = messages[-1] if messages else None
    if not isinstance(last, dict):
        return False
    if operation == CHAT_COMPLETIONS:
        return last.get("role") in ("tool", "function")
    if operation == RESPONSES:
        kind = last.get("type")
        return isinstance(kind, str) and kind in TOOL_RESULT_ITEMS
    content = last.get("content")
    return (
        last.get("role") == "user"
        and isinstance(content, list)
        and any(isinstance(block, dict) and block.get("type") == "tool_result" for block in content)
    )


def _last_user_text(messages: list[Any]) -> str:
    """The last text of the last message when the caller wrote it (not a tool's result): agent
    clients put reminders that list their tools in earlier parts of the same message."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "user":
        return ""
    texts = texts_of(last)
    return texts[-1] if texts else ""


TEXT_KEYS = ("text", "content", "output")


def texts_of(value: Any) -> list[str]:
    """Every text in a message, its content parts or an input item, in order (iterative, so no
    nesting exhausts the stack)."""
    found: list[str] = []
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, list):
            pending.extend(reversed(item))
        elif isinstance(item, dict):
            pending.extend(item[key] for key in reversed(TEXT_KEYS) if key in item)
    return found


# --- tools -----------------------------------------------------------------------------------------


def _tools(operation: str, tools: Any) -> list[Tool]:
    """The function tools a call may use; other kinds (server tools, Codex's custom tools) are
    accepted and never called."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise Refusal("`tools` must be an array of tool objects.", "tools")
    found = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise Refusal(f"`tools[{index}]` must be an object.", f"tools[{index}]")
        spec = _function_spec(operation, tool)
        if spec is None:
            continue
        name, schema = spec
        where = f"tools[{index}]"
        if not isinstance(name, str) or not name:
            raise Refusal(f"`{where}` must name its function with a non-empty string.", where)
        if schema is None:
            schema = {"type": "object", "properties": {}}
        if not isinstance(schema, dict):
            raise Refusal(f"The parameters of function {name!r} must be a JSON schema object.", where)
        _check_schema(schema, name, where)
        found.append(Tool(name=name, schema=schema))
    return found


def _function_spec(operation: str, tool: dict[str, Any]) -> tuple[Any, Any] | None:
    """(name, schema) of a function tool in the family's shape; None for another kind of tool."""
    kind = tool.get("type")
    if operation == CHAT_COMPLETIONS:
        if kind != "function":
            return None
        function = tool.get("function")
        if not isinstance(function, dict):
            raise Refusal("A function tool needs its `function` object.", "tools")
        return function.get("name"), function.get("parameters")
    if operation == RESPONSES:
        return (tool.get("name"), tool.get("parameters")) if kind == "function" else None
    if kind not in (None, "custom"):  # Anthropic's server tools (web_search_..., bash_...) are typed
        return None
    return tool.get("name"), tool.get("input_schema")


def _check_schema(schema: dict[str, Any], name: str, where: str) -> None:
    from jsonschema import SchemaError

    pending: list[Any] = [schema]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                too_many = isinstance(item, int) and not isinstance(item, bool) and item > MAX_SCHEMA_MINIMUM
                if key in SCHEMA_MINIMUM_KEYS and too_many:
                    raise Refusal(
                        f"The schema of {name!r} asks for {key} {item}; the demo makes at most "
                        f"{MAX_SCHEMA_MINIMUM}.",
                        where,
                    )
                pending.append(item)
        elif isinstance(value, list):
            pending.extend(value)
    try:
        schema_validator(schema).check_schema(schema)
    except SchemaError as exc:
        raise Refusal(f"Invalid schema for {name!r}: {exc.message}", where) from None
    except Exception:  # a schema jsonschema cannot even read ($schema of another type, say)
        raise Refusal(f"Invalid schema for {name!r}.", where) from None


def schema_validator(schema: dict[str, Any]) -> Any:
    """The jsonschema validator class for the schema's `$schema` (draft 2020-12 when it names none
    that jsonschema knows)."""
    from jsonschema import Draft202012Validator, validators

    return validators.validator_for(schema, default=Draft202012Validator)


def _tool_choice(operation: str, choice: Any, tools: list[Tool]) -> tuple[Tool | None, bool]:
    """(the tool the choice forces, whether it forbids calls)."""
    if choice is None:
        return None, False
    anthropic = operation in (MESSAGES, MESSAGES_COUNT_TOKENS)
    forced_any = () if anthropic else ("required",)
    name: Any = None
    if isinstance(choice, str):
        if choice == "none":
            return None, True
        if choice in forced_any:
            return _first(tools, "tool_choice"), False
        if choice == "auto":
            return None, False
        raise Refusal(f"`tool_choice` {choice!r} is not one of none, auto, required.", "tool_choice")
    if not isinstance(choice, dict):
        raise Refusal("`tool_choice` must be a string or an object.", "tool_choice")
    kind = choice.get("type")
    if anthropic:
        if kind in ("auto", None):
            return None, False
        if kind == "none":
            return None, True
        if kind == "any":
            return _first(tools, "tool_choice"), False
        if kind != "tool":
            raise Refusal("`tool_choice.type` must be one of auto, any, tool, none.", "tool_choice")
        name = choice.get("name")
    elif kind == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else choice.get("name")
    else:
        return None, False  # allowed_tools, hosted tools, custom tools: not forced calls of a function
    for tool in tools:
        if tool.name == name:
            return tool, False
    raise Refusal(f"Tool choice {name!r} is not among the request's function tools.", "tool_choice")


def _first(tools: list[Tool], param: str) -> Tool:
    if not tools:
        raise Refusal("A tool call is required, but the request gives no function tools.", param)
    return tools[0]


def _named_in(text: str, tools: list[Tool]) -> Tool | None:
    """The first tool whose name the text says as a word."""
    for tool in tools:
        if re.search(rf"(?<!\w){re.escape(tool.name)}(?!\w)", text):
            return tool
    return None


# --- the output's form -----------------------------------------------------------------------------


def _output_schema(operation: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON the answer must be, if the request asks for JSON: chat's `response_format`, the
    Responses API's `text.format`, Anthropic's `output_format` or `output_config.format`."""
    if operation == CHAT_COMPLETIONS:
        form, param = body.get("response_format"), "response_format"
        nested = form.get("json_schema") if isinstance(form, dict) else None
        schema = nested.get("schema") if isinstance(nested, dict) else None
    elif operation == RESPONSES:
        text = body.get("text")
        form, param = (text.get("format") if isinstance(text, dict) else None), "text.format"
        schema = form.get("schema") if isinstance(form, dict) else None
    else:
        config = body.get("output_config")
        form, param = body.get("output_format"), "output_format"
        if form is None and isinstance(config, dict):
            form, param = config.get("format"), "output_config.format"
        schema = form.get("schema") if isinstance(form, dict) else None
    if form is None:
        return None
    if not isinstance(form, dict):
        raise Refusal(f"`{param}` must be an object.", param)
    kind = form.get("type")
    if kind == "json_object":
        return {}
    if kind != "json_schema":
        return None
    if not isinstance(schema, dict):
        raise Refusal(f"`{param}` of type json_schema needs its `schema` object.", param)
    _check_schema(schema, "the output format", param)
    return schema


def _stop(operation: str, body: dict[str, Any]) -> tuple[str, ...]:
    name = "stop_sequences" if operation in (MESSAGES, MESSAGES_COUNT_TOKENS) else "stop"
    value = body.get(name) if operation != RESPONSES else None
    if value is None:
        return ()
    if isinstance(value, str) and operation == CHAT_COMPLETIONS:
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Refusal(f"`{name}` must be an array of strings.", name)
    if operation == CHAT_COMPLETIONS and len(value) > MAX_STOP_SEQUENCES:
        raise Refusal(f"`stop` takes at most {MAX_STOP_SEQUENCES} sequences.", "stop")
    return tuple(item for item in value if item)


def _choices(operation: str, body: dict[str, Any]) -> int:
    value = body.get("n") if operation == CHAT_COMPLETIONS else None
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_CHOICES:
        raise Refusal(f"`n` must be an integer from 1 to {MAX_CHOICES}.", "n")
    return value
