"""System checks of the upstreams' configuration in the database.

`upstream_keys_check` reads the database, so it is registered as a database check (`Tags.database`),
as Django's own database checks are: it runs for `manage.py check --database default` and for
`migrate`, not for every other management command: a plain check runs with each command
(`loadconfig`, `createaccount`, `topup`, `createapikey`, each step of `make run`), which would print
the same warnings once per command."""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError

# The kinds whose calls need a provider key from the environment; an `openai-compatible` server needs
# one only when it names a variable (a local vLLM or Ollama takes none).
KINDS_WITH_KEYS = ("openai", "openai-compatible", "gemini", "anthropic")
KEY_OPTIONAL = "openai-compatible"


def upstream_keys_check(
    app_configs: Any = None, databases: Collection[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """A warning for each enabled upstream whose key variable is unset or empty: every call to it
    would answer 502 `upstream_misconfigured`. Only when asked to check the default database."""
    from upstreams.models import Upstream

    if not databases or DEFAULT_DB_ALIAS not in databases:
        return []
    try:
        upstreams = list(
            Upstream.objects.using(DEFAULT_DB_ALIAS)
            .filter(enabled=True, kind__in=KINDS_WITH_KEYS)
            .order_by("name")
            .values_list("name", "kind", "api_key_env")
        )
    except DatabaseError:
        return []  # no database (or no table yet): nothing to check
    warnings: list[checks.CheckMessage] = []
    for name, kind, env_name in upstreams:
        if (env_name and os.environ.get(env_name, "").strip()) or (kind == KEY_OPTIONAL and not env_name):
            continue
        where = (
            f"the environment variable {env_name} is unset or empty" if env_name else "names no key variable"
        )
        warnings.append(
            checks.Warning(
                f"Upstream {name!r} ({kind}): {where}; its calls will fail with 502 upstream_misconfigured.",
                hint="Set the variable in the gateway's environment, or disable the upstream.",
                obj=name,
                id="upstreams.W001",
            )
        )
    return warnings
