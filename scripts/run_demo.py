"""`make run`: migrate, load config/demo.toml, print the demo keys with curl lines, serve.

Runs with the settings of the environment (DEBUG=1 and SQLite unless told otherwise); the gateway is
served by gunicorn with gunicorn.conf.py on GATEWAY_BIND (default 127.0.0.1:8000).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def manage(*args: str, capture: bool = False) -> str:
    result = subprocess.run(  # noqa: S603 - fixed arguments, our own manage.py
        [PYTHON, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        check=True,
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    return result.stdout or ""


def banner(facts: dict, *, bind: str) -> str:
    """What `make run` prints: the keys with a curl line each, and only the setup hints that still apply."""
    key, chat_key = facts["keys"]["Alpha-Image"], facts["keys"]["Demo-Chat"]
    body = '{"model": "alpha-image-2", "prompt": "a lighthouse at dawn", "size": "1024x1024"}'
    chat_body = '{"model": "demo-chat", "messages": [{"role": "user", "content": "Hello"}]}'
    new = "new" if "Alpha-Image" in facts["created"] else "kept in .demo-keys"
    chat_new = "new" if "Demo-Chat" in facts["created"] else "kept in .demo-keys"
    sign_in_hint = " (give the demo user a password first: .venv/bin/python manage.py changepassword demo)"
    superuser_hint = " (create a staff user: .venv/bin/python manage.py createsuperuser)"
    return (
        "\nImage Gateway (demo provider) is starting on http://" + bind + "\n"
        f"\nDemo API key ({new}): {key}\n"
        "\nTry it:\n"
        f"  curl -s http://{bind}/v1/images/generations \\\n"
        f"    -H {shlex.quote('Authorization: Bearer ' + key)} \\\n"
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d {shlex.quote(body)}\n"
        f"\nDemo text key (Demo-Chat group; chat completions, responses, messages; {chat_new}): {chat_key}\n"
        f"  curl -s http://{bind}/v1/chat/completions \\\n"
        f"    -H {shlex.quote('Authorization: Bearer ' + chat_key)} \\\n"
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d {shlex.quote(chat_body)}\n"
        f"\nConsole: http://{bind}/console/{sign_in_hint if facts['needs_password'] else ''}\n"
        f"Admin:   http://{bind}/admin/{superuser_hint if facts['needs_superuser'] else ''}\n"
    )


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    manage("migrate", "--noinput", "-v", "0")
    manage("loadconfig", str(ROOT / "config" / "demo.toml"))
    # The keys of earlier runs while they still work (kept in the git-ignored .demo-keys), else new ones.
    facts = json.loads(manage("demo_keys", str(ROOT / ".demo-keys"), capture=True))
    bind = os.environ.get("GATEWAY_BIND", "127.0.0.1:8000")
    print(banner(facts, bind=bind), flush=True)
    gunicorn = str(Path(PYTHON).with_name("gunicorn"))
    os.execv(gunicorn, [gunicorn, "--config", str(ROOT / "gunicorn.conf.py"), "gateway_project.wsgi"])  # noqa: S606


if __name__ == "__main__":
    main()
