"""System checks (`manage.py check`, run at start-up by runserver and by the deployment's check step)."""

from __future__ import annotations

import os
from typing import Any

from django.core import checks
from django.db import DatabaseError

# The kinds whose calls need a provider key from the environment.
KINDS_WITH_KEYS = ("openai", "gemini", "anthropic")


def upstream_keys_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A warning for each enabled upstream whose key variable is unset or empty: every call to it
    would answer 502 `upstream_misconfigured`."""
    from upstreams.models import Upstream

    try:
        upstreams = list(
            Upstream.objects.filter(enabled=True, kind__in=KINDS_WITH_KEYS)
            .order_by("name")
            .values_list("name", "kind", "api_key_env")
        )
    except DatabaseError:
        return []  # no database (or no table yet): nothing to check
    warnings = []
    for name, kind, env_name in upstreams:
        if env_name and os.environ.get(env_name, "").strip():
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
