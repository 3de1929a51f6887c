"""Re-record the corpus of real client request bodies (tests/clients/corpus/).

    .venv/bin/python -m tests.clients.record [CLIENT ...]

Runs each client (or only those named, e.g. `ai-sdk`) against the capture server
(tests/clients/capture.py, 127.0.0.1 only) with its vendor's model names (the agent CLIs also with
the recipe's own): the agent CLIs with the recipes of docs/text.md in a temporary HOME and working
directory, the other clients through tests/clients/drivers.py. Writes every JSON body they sent,
with `index.json` saying which client (and version) sent it to which endpoint. Machine paths and the
key are replaced by fixed placeholders. The old corpus is replaced (the named clients' part of it,
when clients are named).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from tests.clients import drivers
from tests.clients.capture import CaptureServer
from tests.clients.recipes import ROOT, cli_run

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
KEY = "sk-recording-key"
KEY_PLACEHOLDER = "sk-placeholder"
HOME_PLACEHOLDER = "/home/user"
CWD_PLACEHOLDER = "/home/user/project"
OPENAI_MODEL = "gpt-5.1"
QWEN_MODEL = "qwen3-coder-plus"
ANTHROPIC_MODEL = "claude-sonnet-4-6"
# The AI SDK asks for its catalog's output maximum of a Claude model it knows when the caller sets
# none: 128,000 for claude-sonnet-4-6, 64,000 for claude-sonnet-4-5, the id config/examples serves.
AI_SDK_ANTHROPIC_MODEL = "claude-sonnet-4-5"
SAY_HELLO = "Say hello in five words"
# An agent CLI asked to use one of its tools: the capture server calls it, the CLI runs it and sends
# its result, which is recorded with the rest.
CLAUDE_TOOL_PROMPT = "List the files here: run ls with the Bash tool."
CODEX_TOOL_PROMPT = "List the files here: run ls with the exec_command tool."
# Qwen Code and opencode: a read-only tool of theirs.
GLOB_TOOL_PROMPT = "List the files here with the glob tool."


def node_version(package: str) -> str:
    manifest = HERE / "node" / "node_modules" / package / "package.json"
    return json.loads(manifest.read_text())["version"]


def _sanitize(body: dict, replacements: list[tuple[str, str]]) -> dict:
    """The body with the machine's paths, the key and the clients' machine ids replaced."""
    text = json.dumps(body, ensure_ascii=False)
    for old, new in replacements:
        text = text.replace(old, new)
    text = re.sub(r"/tmp/[\w.-]+", CWD_PLACEHOLDER, text)
    # Claude Code names its memory folder after the working directory, "/" turned into "-".
    text = re.sub(r"-tmp-igw-record-[\w-]*?-home-project", CWD_PLACEHOLDER.replace("/", "-"), text)
    text = re.sub(r'(device_id\\?"\s*:\s*\\?")[0-9a-f]{64}', r"\g<1>" + "0" * 64, text)
    text = re.sub(
        r'(installation_id\\?"\s*:\s*\\?")[0-9a-f-]{36}', r"\g<1>00000000-0000-0000-0000-000000000000", text
    )
    return json.loads(text)


def _cli(title: str, model: str | None, prompt: str | None) -> Callable[[str, Path, Path], None]:
    def run(url: str, home: Path, cwd: Path) -> None:
        done = cli_run(title, base_url=url, key=KEY, home=home, cwd=cwd, model=model, prompt=prompt)
        if done.returncode != 0:
            raise RuntimeError(f"{title} exited {done.returncode}: {done.stderr[-2000:]}")

    return run


def _py(function: Callable, *args, root: bool = False, **kwargs) -> Callable[[str, Path, Path], None]:
    def run(url: str, home: Path, cwd: Path) -> None:
        function(url if root else f"{url}/v1", KEY, *args, **kwargs)

    return run


# (client, version, recording name, what to run)
RECORDINGS: list[tuple[str, str, str, Callable[[str, Path, Path], None]]] = [
    (
        "claude-code",
        node_version("@anthropic-ai/claude-code"),
        "hello",
        _cli("Claude Code", ANTHROPIC_MODEL, None),
    ),
    (
        "claude-code",
        node_version("@anthropic-ai/claude-code"),
        "tool",
        _cli("Claude Code", ANTHROPIC_MODEL, CLAUDE_TOOL_PROMPT),
    ),
    # With the recipe's own model id, which the CLIs do not know: they send other things then
    # (Claude Code a `system` message among the messages).
    (
        "claude-code",
        node_version("@anthropic-ai/claude-code"),
        "gateway-model",
        _cli("Claude Code", None, None),
    ),
    ("codex", node_version("@openai/codex"), "hello", _cli("Codex CLI", OPENAI_MODEL, None)),
    ("codex", node_version("@openai/codex"), "gateway-model", _cli("Codex CLI", None, None)),
    ("codex", node_version("@openai/codex"), "tool", _cli("Codex CLI", OPENAI_MODEL, CODEX_TOOL_PROMPT)),
    ("qwen-code", node_version("@qwen-code/qwen-code"), "hello", _cli("Qwen Code", QWEN_MODEL, None)),
    ("qwen-code", node_version("@qwen-code/qwen-code"), "gateway-model", _cli("Qwen Code", None, None)),
    (
        "qwen-code",
        node_version("@qwen-code/qwen-code"),
        "tool",
        _cli("Qwen Code", QWEN_MODEL, GLOB_TOOL_PROMPT),
    ),
    ("opencode", node_version("opencode-ai"), "hello", _cli("opencode", None, None)),
    ("opencode", node_version("opencode-ai"), "tool", _cli("opencode", None, GLOB_TOOL_PROMPT)),
    ("openai", version("openai"), "chat", _py(drivers.openai_chat_tool_loop, OPENAI_MODEL, stream=False)),
    (
        "openai",
        version("openai"),
        "chat-stream",
        _py(drivers.openai_chat_tool_loop, OPENAI_MODEL, stream=True),
    ),
    (
        "openai",
        version("openai"),
        "responses",
        _py(drivers.openai_responses_tool_loop, OPENAI_MODEL, stream=False),
    ),
    (
        "openai",
        version("openai"),
        "responses-stream",
        _py(drivers.openai_responses_tool_loop, OPENAI_MODEL, stream=True),
    ),
    (
        "anthropic",
        version("anthropic"),
        "messages",
        _py(drivers.anthropic_tool_loop, ANTHROPIC_MODEL, stream=False, root=True),
    ),
    (
        "anthropic",
        version("anthropic"),
        "messages-stream",
        _py(drivers.anthropic_tool_loop, ANTHROPIC_MODEL, stream=True, root=True),
    ),
    (
        "anthropic",
        version("anthropic"),
        "count-tokens",
        _py(drivers.anthropic_count_tokens, ANTHROPIC_MODEL, root=True),
    ),
    (
        "langchain-openai",
        version("langchain-openai"),
        "chat",
        _py(drivers.langchain_openai_tool_loop, OPENAI_MODEL),
    ),
    (
        "langchain-openai",
        version("langchain-openai"),
        "responses",
        _py(drivers.langchain_openai_tool_loop, OPENAI_MODEL, responses_api=True),
    ),
    (
        "langchain-anthropic",
        version("langchain-anthropic"),
        "messages",
        _py(drivers.langchain_anthropic_tool_loop, ANTHROPIC_MODEL, root=True),
    ),
    ("openai-agents", version("openai-agents"), "responses", _py(drivers.agents_tool_loop, OPENAI_MODEL)),
    (
        "openai-agents",
        version("openai-agents"),
        "chat",
        _py(drivers.agents_tool_loop, OPENAI_MODEL, chat_completions=True),
    ),
    *(
        (
            "ai-sdk",
            node_version("ai"),
            f"{api}{'-stream' if stream else ''}",
            _py(
                drivers.ai_sdk_tool_loop,
                AI_SDK_ANTHROPIC_MODEL if api == "messages" else OPENAI_MODEL,
                api=api,
                stream=stream,
            ),
        )
        for api in ("responses", "chat", "messages")
        for stream in (False, True)
    ),
]

ENDPOINT_SLUGS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "count-tokens",
}


def main(clients: list[str]) -> int:
    """Records every client, or only those named (their old files replaced, the others kept)."""
    unknown = set(clients) - {client for client, *_ in RECORDINGS}
    if unknown:
        print(f"unknown clients: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    index = []
    if clients:
        for entry in json.loads((CORPUS / "index.json").read_text()):
            if entry["client"] in clients:
                (CORPUS / entry["file"]).unlink()
            else:
                index.append(entry)
    else:
        if CORPUS.exists():
            shutil.rmtree(CORPUS)
        CORPUS.mkdir()
    with CaptureServer() as capture:
        for client, client_version, name, run in RECORDINGS:
            if clients and client not in clients:
                continue
            with tempfile.TemporaryDirectory(prefix="igw-record-") as tmp:
                home = Path(tmp) / "home"
                cwd = home / "project"
                cwd.mkdir(parents=True)
                (cwd / "README.md").write_text("A scratch project.\n")
                run(capture.url, home, cwd)
                replacements = [
                    (str(cwd), CWD_PLACEHOLDER),
                    (str(home), HOME_PLACEHOLDER),
                    (str(ROOT), CWD_PLACEHOLDER),
                    (KEY, KEY_PLACEHOLDER),
                ]
                posts = [r for r in capture.take() if r["method"] == "POST"]
            if not posts:
                raise RuntimeError(f"{client} {name} sent nothing")
            for number, request in enumerate(posts, start=1):
                endpoint = request["path"]
                file = f"{client}--{name}--{number}-{ENDPOINT_SLUGS[endpoint]}.json"
                body = _sanitize(request["body"], replacements)
                (CORPUS / file).write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")
                index.append(
                    {"file": file, "client": client, "version": client_version, "endpoint": endpoint}
                )
                print(f"{file}: {len(json.dumps(body))} bytes", file=sys.stderr)
    (CORPUS / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
