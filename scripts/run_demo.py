"""`make run`: migrate, load config/demo.toml, create a demo key, print it with a curl line, serve.

Runs with the settings of the environment (DEBUG=1 and SQLite unless told otherwise); the gateway is
served by gunicorn with gunicorn.conf.py on GATEWAY_BIND (default 127.0.0.1:8000).
"""

from __future__ import annotations

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


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    manage("migrate", "--noinput", "-v", "0")
    manage("loadconfig", str(ROOT / "config" / "demo.toml"))
    key = manage("createapikey", "demo", "--group", "Alpha-Image", "--label", "make run", capture=True)
    key = key.strip().splitlines()[-1]
    # A key is bound to one group: the text models are in Demo-Chat.
    chat_key = manage(
        "createapikey", "demo", "--group", "Demo-Chat", "--label", "make run (text)", capture=True
    )
    chat_key = chat_key.strip().splitlines()[-1]
    bind = os.environ.get("GATEWAY_BIND", "127.0.0.1:8000")
    body = '{"model": "alpha-image-2", "prompt": "a lighthouse at dawn", "size": "1024x1024"}'
    chat_body = '{"model": "demo-chat", "messages": [{"role": "user", "content": "Hello"}]}'
    print(
        "\nImage Gateway (demo provider) is starting on http://" + bind + "\n"
        f"\nDemo API key (shown once): {key}\n"
        "\nTry it:\n"
        f"  curl -s http://{bind}/v1/images/generations \\\n"
        f"    -H {shlex.quote('Authorization: Bearer ' + key)} \\\n"
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d {shlex.quote(body)}\n"
        f"\nDemo text key (Demo-Chat group; chat completions, responses, messages): {chat_key}\n"
        f"  curl -s http://{bind}/v1/chat/completions \\\n"
        f"    -H {shlex.quote('Authorization: Bearer ' + chat_key)} \\\n"
        "    -H 'Content-Type: application/json' \\\n"
        f"    -d {shlex.quote(chat_body)}\n"
        f"\nConsole: http://{bind}/console/ (give the demo user a password first: "
        ".venv/bin/python manage.py changepassword demo)\n"
        f"Admin:   http://{bind}/admin/ (create a staff user: .venv/bin/python manage.py createsuperuser)\n",
        flush=True,
    )
    gunicorn = str(Path(PYTHON).with_name("gunicorn"))
    os.execv(gunicorn, [gunicorn, "--config", str(ROOT / "gunicorn.conf.py"), "gateway_project.wsgi"])  # noqa: S606


if __name__ == "__main__":
    main()
