"""Small, strict readers for configuration from the environment.

Every reader fails loudly with the variable's name and what was wrong, so a bad value stops the
process at start instead of surfacing later as odd behaviour.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _fail(name: str, value: str, why: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"Environment variable {name}={value!r} is invalid: {why}")


def load_dotenv(path: Path) -> None:
    """Read KEY=VALUE lines from a .env file into os.environ without overriding real variables."""
    if not path.is_file():
        return
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :]
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ImproperlyConfigured(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        os.environ.setdefault(key, value)


def env_file_load(base_dir: Path) -> None:
    """Read the .env file of the deployment, if any: GATEWAY_ENV_FILE names it (default
    `<base_dir>/.env`); empty reads none (the test settings do that). The settings and gunicorn.conf.py
    both call this, so the server's own settings see the same environment as Django's."""
    env_file = os.environ.get("GATEWAY_ENV_FILE", str(base_dir / ".env"))
    if env_file:
        load_dotenv(Path(env_file))


DEFAULT_DATABASE_URL = "sqlite:///db.sqlite3"
# Django's own PostgreSQL backend (its connection pool is psycopg_pool's, `OPTIONS["pool"]`).
POSTGRESQL_ENGINE = "django.db.backends.postgresql"


def database_url() -> str:
    """DATABASE_URL, or the development SQLite file when it is unset or empty."""
    return env_str("DATABASE_URL", DEFAULT_DATABASE_URL) or DEFAULT_DATABASE_URL


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise _fail(name, value, "expected one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise _fail(name, value, "expected a whole number") from None
    if minimum is not None and number < minimum:
        raise _fail(name, value, f"must be at least {minimum}")
    if maximum is not None and number > maximum:
        raise _fail(name, value, f"must be at most {maximum}")
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = float(value.strip())
    except ValueError:
        raise _fail(name, value, "expected a number such as 1.5") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise _fail(name, value, "expected a finite number")
    if minimum is not None and number < minimum:
        raise _fail(name, value, f"must be at least {minimum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_timezone(name: str, default: str = "UTC") -> str:
    value = env_str(name, default) or default
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise _fail(name, value, "not an IANA time zone name such as UTC or Asia/Shanghai") from None
    return value


def env_public_url(name: str, default: str) -> str:
    value = env_str(name, default) or default
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _fail(name, value, "expected an absolute http(s) URL such as https://gateway.example.com")
    if parts.query or parts.fragment:
        raise _fail(name, value, "must not carry a query string or fragment")
    return value.rstrip("/")


def env_url(name: str, default: str | None = None) -> str | None:
    value = env_str(name, default)
    if value is None:
        return None
    parts = urlsplit(value)
    if not parts.scheme or not parts.netloc:
        raise _fail(name, value, "expected a URL such as redis://127.0.0.1:6379/0")
    return value


def database_from_url(name: str, value: str, *, base_dir: Path) -> dict:
    """Turn sqlite:///path or postgres://user:pass@host:port/db into a Django DATABASES entry."""
    parts = urlsplit(value)
    scheme = parts.scheme
    if scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path, as dj-database-url reads them.
        path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if not path:
            raise _fail(name, value, "sqlite URL needs a file path, e.g. sqlite:///db.sqlite3")
        db_path = Path(path)
        if not db_path.is_absolute():
            db_path = base_dir / db_path
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(db_path)}
    if scheme in ("postgres", "postgresql", "pgsql"):
        db_name = unquote(parts.path.lstrip("/"))
        if not db_name:
            raise _fail(name, "<hidden>", "postgres URL needs a database name, e.g. postgres://u:p@host/db")
        try:
            port = parts.port
        except ValueError:
            raise _fail(name, "<hidden>", "the port is not a number") from None
        options: dict[str, str] = {}
        for pair in filter(None, parts.query.split("&")):
            key, _, val = pair.partition("=")
            options[unquote(key)] = unquote(val)
        return {
            "ENGINE": POSTGRESQL_ENGINE,
            "NAME": db_name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": _postgres_host(parts.netloc),
            "PORT": str(port or ""),
            "OPTIONS": options,
        }
    # Never echo a URL that may hold a password.
    raise _fail(name, f"{scheme}://…", "only sqlite:// and postgres:// URLs are supported")


def _postgres_host(netloc: str) -> str:
    """The host part of a URL's netloc; a %2F-encoded unix socket directory is kept as written."""
    hostport = netloc.rsplit("@", 1)[-1]
    if hostport.startswith("["):  # [::1]:5432
        return hostport[1 : hostport.index("]")]
    return unquote(hostport.rsplit(":", 1)[0] if hostport.count(":") == 1 else hostport)
