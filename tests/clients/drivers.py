"""The Python clients driven the way their users drive them: each function runs one library's tool
loop (ask, get a tool call, run the tool, send its result, get the final answer) against a base URL.

The same functions record the corpus (tests/clients/record.py, against the capture server) and run the
end-to-end tests (test_real_clients.py, against a live gateway), so that what was recorded is what
is tested. Each returns the final text and how many HTTP calls it made (every client is built with
retries off, so one model call is one HTTP call).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai

TOOL = "get_weather"
PROMPT = f"What is the weather in Paris today? Use the {TOOL} tool."
SYSTEM = "You are a terse weather assistant. Answer in one sentence."
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def get_weather(city: str = "Paris", unit: str = "celsius") -> str:
    """The tool every loop calls: a fixed report, so that the final call carries a known result."""
    return json.dumps({"city": city, "unit": unit, "forecast": "sunny", "temperature": 21})


def _run_tool(name: str, arguments: str | dict) -> str:
    assert name == TOOL, f"the model called an unknown tool {name!r}"
    args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
    return get_weather(**{k: v for k, v in args.items() if k in ("city", "unit")})


@dataclass
class LoopResult:
    answer: str  # the final text
    calls: int  # HTTP calls made
    tool_calls: int  # tool calls the model asked for and the loop answered


# --- openai ----------------------------------------------------------------------------------------


def openai_client(base_url: str, key: str) -> openai.OpenAI:
    """`base_url` is the gateway's /v1."""
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)


def openai_chat_tool_loop(base_url: str, key: str, model: str, *, stream: bool) -> LoopResult:
    tools = [
        {
            "type": "function",
            "function": {
                "name": TOOL,
                "description": "Current weather of a city.",
                "parameters": WEATHER_SCHEMA,
            },
        }
    ]
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    calls = tool_calls = 0
    with openai_client(base_url, key) as client:
        for _ in range(4):
            calls += 1
            kwargs = {
                "model": model,
                "messages": messages,
                "tools": tools,
                "tool_choice": "auto",
                "max_completion_tokens": 512,
                "temperature": 0.2,
                "user": "weather-demo",
            }
            if stream:
                message = _openai_chat_stream(client, kwargs)
            else:
                message = (
                    client.chat.completions.create(**kwargs).choices[0].message.model_dump(exclude_none=True)
                )
            if not message.get("tool_calls"):
                return LoopResult(message.get("content") or "", calls, tool_calls)
            messages.append(message)
            for call in message["tool_calls"]:
                tool_calls += 1
                result = _run_tool(call["function"]["name"], call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise AssertionError("no final answer after four calls")


def _openai_chat_stream(client: openai.OpenAI, kwargs: dict) -> dict:
    """The assistant message a stream adds up to, as the caller sends it back."""
    content, calls = [], {}
    stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] = call.id or entry["id"]
                if call.function:
                    entry["name"] += call.function.name or ""
                    entry["arguments"] += call.function.arguments or ""
    message: dict = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(calls.items())
        ]
    return message


def openai_responses_tool_loop(base_url: str, key: str, model: str, *, stream: bool) -> LoopResult:
    tools = [
        {
            "type": "function",
            "name": TOOL,
            "description": "Current weather of a city.",
            "parameters": WEATHER_SCHEMA,
            "strict": False,
        }
    ]
    items: list = [{"role": "user", "content": PROMPT}]
    calls = tool_calls = 0
    with openai_client(base_url, key) as client:
        for _ in range(4):
            calls += 1
            kwargs = {
                "model": model,
                "instructions": SYSTEM,
                "input": items,
                "tools": tools,
                "max_output_tokens": 512,
                "store": False,
                "metadata": {"purpose": "weather-demo"},
            }
            if stream:
                with client.responses.stream(**kwargs) as events:
                    response = events.get_final_response()
            else:
                response = client.responses.create(**kwargs)
            function_calls = [item for item in response.output if item.type == "function_call"]
            if not function_calls:
                return LoopResult(response.output_text, calls, tool_calls)
            for call in function_calls:
                tool_calls += 1
                items.append(call.model_dump(exclude_none=True))
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": call.call_id,
                        "output": _run_tool(call.name, call.arguments),
                    }
                )
    raise AssertionError("no final answer after four calls")


# --- anthropic -------------------------------------------------------------------------------------


def anthropic_client(base_url: str, key: str) -> anthropic.Anthropic:
    """`base_url` is the gateway's root (the SDK adds /v1)."""
    return anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=60)


ANTHROPIC_TOOLS = [
    {
        "name": TOOL,
        "description": "Current weather of a city.",
        "input_schema": WEATHER_SCHEMA,
        "cache_control": {"type": "ephemeral"},
    }
]
ANTHROPIC_SYSTEM = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]


def anthropic_tool_loop(base_url: str, key: str, model: str, *, stream: bool) -> LoopResult:
    """Messages with a cached system prompt and tools, extended thinking and metadata."""
    messages: list[dict] = [{"role": "user", "content": PROMPT}]
    calls = tool_calls = 0
    with anthropic_client(base_url, key) as client:
        for _ in range(4):
            calls += 1
            kwargs = {
                "model": model,
                "max_tokens": 2048,
                "system": ANTHROPIC_SYSTEM,
                "tools": ANTHROPIC_TOOLS,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "metadata": {"user_id": "weather-demo-user"},
                "messages": messages,
            }
            if stream:
                with client.messages.stream(**kwargs) as events:
                    message = events.get_final_message()
            else:
                message = client.messages.create(**kwargs)
            uses = [block for block in message.content if block.type == "tool_use"]
            if not uses:
                return LoopResult(
                    "".join(b.text for b in message.content if b.type == "text"), calls, tool_calls
                )
            messages.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}
            )
            results = []
            for use in uses:
                tool_calls += 1
                results.append(
                    {"type": "tool_result", "tool_use_id": use.id, "content": _run_tool(use.name, use.input)}
                )
            messages.append({"role": "user", "content": results})
    raise AssertionError("no final answer after four calls")


def anthropic_count_tokens(base_url: str, key: str, model: str) -> int:
    with anthropic_client(base_url, key) as client:
        return client.messages.count_tokens(
            model=model,
            system=ANTHROPIC_SYSTEM,
            tools=ANTHROPIC_TOOLS,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": PROMPT}],
        ).input_tokens


# --- LangChain -------------------------------------------------------------------------------------


def _langchain_loop(chat_model) -> LoopResult:
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool

    @tool(TOOL)
    def weather(city: str, unit: str = "celsius") -> str:
        """Current weather of a city."""
        return get_weather(city, unit)

    bound = chat_model.bind_tools([weather])
    messages: list = [SystemMessage(SYSTEM), HumanMessage(PROMPT)]
    tool_calls = 0
    for calls in range(1, 5):
        reply = bound.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return LoopResult(reply.text, calls, tool_calls)
        for call in reply.tool_calls:
            tool_calls += 1
            messages.append(ToolMessage(_run_tool(call["name"], call["args"]), tool_call_id=call["id"]))
    raise AssertionError("no final answer after four calls")


def langchain_openai_tool_loop(
    base_url: str, key: str, model: str, *, responses_api: bool = False, previous_response_id: bool = False
) -> LoopResult:
    """With `previous_response_id` (on the Responses API), each call sends only the messages after the
    last answer, and that answer's id (`use_previous_response_id`)."""
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=key,
        max_retries=0,
        timeout=60,
        max_completion_tokens=512,
        use_responses_api=responses_api,
        use_previous_response_id=previous_response_id,
    )
    return _langchain_loop(chat)


def langchain_anthropic_tool_loop(base_url: str, key: str, model: str) -> LoopResult:
    from langchain_anthropic import ChatAnthropic

    chat = ChatAnthropic(
        model=model, base_url=base_url, api_key=key, max_retries=0, timeout=60, max_tokens=1024
    )
    return _langchain_loop(chat)


# --- OpenAI Agents SDK -----------------------------------------------------------------------------


def agents_tool_loop(
    base_url: str, key: str, model: str, *, chat_completions: bool = False, follow_up: str | None = None
) -> LoopResult:
    """An agent with one function tool, on the Responses API (the SDK's default) or Chat Completions.
    With `follow_up` (Responses), the calls are chained by `previous_response_id`
    (`auto_previous_response_id`: each sends only what is new), and a second run continues the first
    by its `last_response_id`; the result counts both runs' calls."""
    import asyncio

    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)

    @function_tool(name_override=TOOL)
    def weather(city: str, unit: str) -> str:
        """Current weather of a city.

        Args:
            city: City name, e.g. Paris.
            unit: celsius or fahrenheit.
        """
        return get_weather(city, unit if unit in ("celsius", "fahrenheit") else "celsius")

    async def run() -> LoopResult:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
        async with client:
            kind = OpenAIChatCompletionsModel if chat_completions else OpenAIResponsesModel
            agent = Agent(
                name="Weather",
                instructions=SYSTEM,
                tools=[weather],
                model=kind(model=model, openai_client=client),
                model_settings=ModelSettings(max_tokens=512),
            )
            if follow_up is None:
                result = await Runner.run(agent, PROMPT, max_turns=4)
                runs = [result]
            else:
                first = await Runner.run(agent, PROMPT, max_turns=4, auto_previous_response_id=True)
                result = await Runner.run(
                    agent, follow_up, max_turns=4, previous_response_id=first.last_response_id
                )
                runs = [first, result]
        tool_calls = sum(1 for run in runs for item in run.new_items if item.type == "tool_call_item")
        calls = sum(len(run.raw_responses) for run in runs)
        return LoopResult(str(result.final_output), calls, tool_calls)

    return asyncio.run(run())


# --- Vercel AI SDK ---------------------------------------------------------------------------------

AI_SDK_LOOP = Path(__file__).resolve().parent / "node" / "ai_sdk_loop.mjs"


def ai_sdk_tool_loop(
    base_url: str,
    key: str,
    model: str,
    *,
    api: str,
    stream: bool,
    max_output_tokens: int | None = None,
    follow_up: str | None = None,
) -> LoopResult:
    """The AI SDK's multi-step `generateText` (or `streamText`) with one tool, on the OpenAI
    provider's Responses (`api="responses"`, its default) or Chat Completions model, or on the
    Anthropic provider (`api="messages"`). `base_url` is the gateway's /v1. Without
    `max_output_tokens` the SDK chooses the limit (for a model id with `claude-` in it, 128,000 unless
    its catalog knows the model). With `follow_up`, a second turn follows the loop, sent with the
    first turn's answer as the SDK gives it (`response.messages`); the result counts both turns'
    calls. Runs node/ai_sdk_loop.mjs, which the packages pinned in node/package.json serve."""
    job = {
        "maxOutputTokens": max_output_tokens,
        "api": api,
        "stream": stream,
        "baseURL": base_url,
        "key": key,
        "model": model,
        "system": SYSTEM,
        "prompt": PROMPT,
        "tool": TOOL,
        "schema": WEATHER_SCHEMA,
        "followUp": follow_up,
    }
    done = subprocess.run(
        ["node", str(AI_SDK_LOOP)], input=json.dumps(job), capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise AssertionError(f"the AI SDK's loop exited {done.returncode}: {done.stderr[-3000:]}")
    result = json.loads(done.stdout)
    return LoopResult(result["answer"], result["steps"], result["toolCalls"])
