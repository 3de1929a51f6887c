"""The client recipes of docs/text.md ("Client recipes"), read from the doc itself so that the tests
run them as written: each recipe's environment, command line and configuration files (Codex's
config.toml, Qwen Code's settings.json, opencode's opencode.json), with the doc's address and key
put in place of the live gateway's.

The agent CLIs come from tests/clients/node (package.json pins them; `npm ci` there installs them).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "text.md"
NODE_BIN = Path(__file__).resolve().parent / "node" / "node_modules" / ".bin"
DOC_URL = "http://127.0.0.1:8000"
DOC_KEY = "YOUR_GATEWAY_KEY"
DOC_PROMPT = "Say hello in five words"


def _section(title: str) -> str:
    text = DOC.read_text()
    recipes = text.split("\n## Client recipes\n", 1)[1].split("\n## ", 1)[0]
    return recipes.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


@dataclass(frozen=True)
class Recipe:
    env: dict[str, str]  # the exported variables, the live gateway's address and key in place
    argv: list[str]  # the command line, its program resolved in tests/clients/node
    files: dict[str, str]  # configuration files by their path under HOME (".codex/config.toml")


def recipe(title: str, *, base_url: str, key: str, model: str | None = None) -> Recipe:
    """The recipe under `### {title}`; `model` replaces the doc's model names when given (recording
    runs the clients with their vendors' model names)."""
    section = _section(title)

    def fill(value: str) -> str:
        value = value.replace(DOC_URL, base_url).replace(DOC_KEY, key)
        if model:
            value = re.sub(r"\bdemo-(claude|chat)\b", model, value)
        return value

    env: dict[str, str] = {}
    argv: list[str] = []
    for block in _blocks(section, "sh"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                env[name] = fill(value)
            else:
                argv = [fill(w) for w in words]
    return Recipe(env=env, argv=argv, files={path: fill(text) for path, text in _files(section).items()})


def _files(section: str) -> dict[str, str]:
    """The recipe's TOML and JSON blocks, each under the last home path (`~/...`) named before it."""
    files: dict[str, str] = {}
    for block in re.finditer(r"```(?:toml|json)\n(.*?)```", section, flags=re.DOTALL):
        named = re.findall(r"`~/([^`]+)`", section[: block.start()])
        if not named:
            raise ValueError(f"no `~/...` path names the file of this block: {block.group(1)[:60]!r}")
        files[named[-1]] = block.group(1)
    return files


def cli_path(name: str) -> Path:
    return NODE_BIN / name


def cli_run(
    title: str,
    *,
    base_url: str,
    key: str,
    home: Path,
    cwd: Path,
    model: str | None = None,
    prompt: str | None = None,
    timeout: float = 90,
) -> subprocess.CompletedProcess:
    """Run an agent CLI's recipe with a temporary HOME and working directory, and nothing of this
    process's environment but PATH (no key or vendor setting leaks in); `prompt` replaces the doc's."""
    r = recipe(title, base_url=base_url, key=key, model=model)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8", **r.env}
    for path, text in r.files.items():
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(text)
    argv = [str(cli_path(r.argv[0])), *(prompt if prompt and w == DOC_PROMPT else w for w in r.argv[1:])]
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
