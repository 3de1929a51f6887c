from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from gateway_project.modelutils import model_upsert
from groups.models import Group
from images.models import ImageModel, Upstream

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


def image_model_upsert(
    *,
    model_id: str,
    group: Group,
    price: Decimal,
    upstreams: Sequence[Upstream],
    upstream_model: str,
    sizes: list[str],
    qualities: list[str],
    styles: list[str],
    backgrounds: list[str],
    output_formats: list[str],
    output_compression: tuple[int, int] | None,
    max_n: int,
    edits_supported: bool,
    stream_supported: bool,
    default_response_format: str,
    enabled: bool,
) -> tuple[ImageModel, str]:
    low, high = output_compression if output_compression else (None, None)
    image_model, outcome = model_upsert(
        ImageModel,
        lookup={"model_id": model_id, "group": group},
        values={
            "price": price,
            "upstream_model": upstream_model,
            "sizes": sizes,
            "qualities": qualities,
            "styles": styles,
            "backgrounds": backgrounds,
            "output_formats": output_formats,
            "output_compression_min": low,
            "output_compression_max": high,
            "max_n": max_n,
            "edits_supported": edits_supported,
            "stream_supported": stream_supported,
            "default_response_format": default_response_format,
            "enabled": enabled,
        },
    )
    wanted = {upstream.pk for upstream in upstreams}
    if set(image_model.upstreams.values_list("pk", flat=True)) != wanted:
        image_model.upstreams.set(upstreams)
        outcome = "created" if outcome == "created" else "updated"
    return image_model, outcome
