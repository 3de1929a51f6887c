"""Configuration from the environment, read through django-environ, strictly.

django-environ reads the .env file and parses the database URL; the readers here add what it leaves
out: every one fails loudly with the variable's name and what was wrong, so a bad value stops the
process at start instead of surfacing later as odd behaviour.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import environ
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# The lines django-environ's reader understands; it skips any other line with a log warning only.
_DOTENV_LINE = re.compile(r"(?:export )?[A-Za-z_0-9]+=.*")
ENV = environ.Env()


def _fail(name: str, value: str, why: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"Environment variable {name}={value!r} is invalid: {why}")


def load_dotenv(path: Path) -> None:
    """Read KEY=VALUE lines from a .env file into os.environ without overriding real variables.

    django-environ parses the file (quotes, escapes, `export`); a line it would skip is refused here
    with its number, so a typo in the deployment's .env stops the start instead of vanishing.
    """
    if not path.is_file():
        return
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not _DOTENV_LINE.fullmatch(line):
            raise ImproperlyConfigured(f"{path}:{number}: expected KEY=VALUE, got {line!r}")
    environ.Env.read_env(path, overwrite=False)


def env_file_load(base_dir: Path) -> None:
    """Read the .env file of the deployment, if any: GATEWAY_ENV_FILE names it (default
    `<base_dir>/.env`); empty reads none (the test settings do that). The settings and gunicorn.conf.py
    both call this, so the server's own settings see the same environment as Django's."""
    env_file = os.environ.get("GATEWAY_ENV_FILE", str(base_dir / ".env"))
    if env_file:
        load_dotenv(Path(env_file))


DEFAULT_DATABASE_URL = "sqlite:///db.sqlite3"
# Django's own PostgreSQL backend; its pool is psycopg_pool's, `OPTIONS["pool"]`.
POSTGRESQL_ENGINE = "django.db.backends.postgresql"
_POSTGRES_SCHEMES = ("postgres", "postgresql", "pgsql")


def database_url() -> str:
    """DATABASE_URL, or the development SQLite file when it is unset or empty."""
    return env_str("DATABASE_URL", DEFAULT_DATABASE_URL) or DEFAULT_DATABASE_URL


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


def env_bool(name: str, default: bool = False) -> bool:
    # Not ENV.bool: it reads any word it does not know (a typo such as "ture") as false.
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
        number = ENV.int(name)
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
        # Not ENV.float: it drops every character but digits, "." and "," first, so "1.5s" would
        # read as 1.5 and "1e3" as 13.0.
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


def env_networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma-separated list of addresses or CIDR networks (`10.0.0.5`, `10.0.0.0/24`, `::1`); empty
    or unset is none. Strict as gunicorn's `forwarded_allow_ips` is: `10.0.0.5/24` (host bits set) is
    refused, since it is usually a typo for one address or for `10.0.0.0/24`."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as error:
            raise _fail(name, os.environ.get(name, ""), f"{item!r}: {error}") from None
    return tuple(networks)


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
    """Turn sqlite:///path or postgres://user:pass@host:port/db into a Django DATABASES entry.

    django-environ parses the URL; only SQLite and PostgreSQL (on the gateway's pooled engine) are
    accepted, a relative SQLite path is under `base_dir`, and a URL that may hold a password is never
    echoed in an error.
    """
    scheme = urlsplit(value).scheme
    if scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path; "sqlite://" alone would be in memory.
        if urlsplit(value).path in ("", "/"):
            raise _fail(name, value, "sqlite URL needs a file path, e.g. sqlite:///db.sqlite3")
        config = environ.Env.db_url_config(value)
        db_path = Path(config["NAME"])
        return {
            "ENGINE": config["ENGINE"],
            "NAME": str(db_path if db_path.is_absolute() else base_dir / db_path),
        }
    if scheme in _POSTGRES_SCHEMES:
        try:
            config = environ.Env.db_url_config(value, engine=POSTGRESQL_ENGINE)
        except ValueError:
            raise _fail(name, "<hidden>", "the port is not a number") from None
        if not config["NAME"]:
            raise _fail(name, "<hidden>", "postgres URL needs a database name, e.g. postgres://u:p@host/db")
        # A unix socket directory is written %2F-encoded in the host part; Django wants the path.
        config["HOST"] = unquote(config["HOST"])
        config["PORT"] = str(config["PORT"])
        config.setdefault("OPTIONS", {})
        return config
    # Never echo a URL that may hold a password.
    raise _fail(name, f"{scheme}://…", "only sqlite:// and postgres:// URLs are supported")


def env_origins(name: str) -> list[str]:
    """Comma-separated browser origins (`https://app.example.com`), or `*` alone for any origin;
    unset or empty: none."""
    origins = env_list(name, [])
    if origins == ["*"]:
        return origins
    for origin in origins:
        parts = urlsplit(origin)
        if origin == "*":
            raise _fail(name, ",".join(origins), "`*` allows every origin: give it alone")
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
            raise _fail(name, origin, "expected an origin such as https://app.example.com (no path)")
    return origins


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = (env_str(name, default) or default).strip().lower()
    if value not in choices:
        raise _fail(name, value, f"expected one of {', '.join(choices)}")
    return value
