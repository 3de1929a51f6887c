"""Write a development `.env` (DEBUG=1 and freshly generated secrets) when the project has none.

`make run`, `make lint` and `make test` call this, so that `manage.py` works in a fresh checkout
and API keys keep working across restarts (the key pepper stays the same). Production never uses
it: there, SECRET_KEY and GATEWAY_KEY_PEPPER come from the real environment.
"""

from __future__ import annotations

import secrets
from pathlib import Path

ENV_FILE = Path(__file__).resolve().parent.parent / ".env"


def main() -> None:
    if ENV_FILE.exists():
        return
    ENV_FILE.write_text(
        "# Development settings written by `make` (scripts/dev_env.py); git-ignored. See .env.example.\n"
        "DEBUG=1\n"
        f"SECRET_KEY={secrets.token_urlsafe(50)}\n"
        f"GATEWAY_KEY_PEPPER={secrets.token_urlsafe(50)}\n"
    )
    ENV_FILE.chmod(0o600)
    print(f"wrote a development {ENV_FILE.name} (DEBUG=1, generated secrets)")


if __name__ == "__main__":
    main()
