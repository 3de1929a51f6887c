"""Writes of upstreams."""

from __future__ import annotations

from core.modelutils import model_upsert
from upstreams.models import Upstream

UPSTREAM_RETRY_FIELDS = (
    "max_retries",
    "retry_base_seconds",
    "retry_max_wait_seconds",
    "retry_deadline_seconds",
    "circuit_threshold",
    "circuit_cooldown_seconds",
)


def upstream_upsert(
    *,
    name: str,
    kind: str,
    base_url: str,
    api_key_env: str,
    timeout_seconds: int,
    priority: int,
    weight: int,
    enabled: bool,
    retry: dict[str, float | int | None] | None = None,
) -> tuple[Upstream, str]:
    """Create or update an upstream by name. `retry` sets its own retry/circuit fields
    (max_retries, retry_base_seconds, ...); a missing or None value uses the global default."""
    retry_fields = {name: (retry or {}).get(name) for name in UPSTREAM_RETRY_FIELDS}
    return model_upsert(
        Upstream,
        lookup={"name": name},
        values={
            "kind": kind,
            "base_url": base_url,
            "api_key_env": api_key_env,
            "timeout_seconds": timeout_seconds,
            "priority": priority,
            "weight": weight,
            "enabled": enabled,
            **retry_fields,
        },
    )
