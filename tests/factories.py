"""Builders for test data, through the project's own services."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from chat.models import TextModel
from chat.services import text_model_upsert
from groups.models import Group
from groups.services import group_upsert
from images.models import ImageModel
from images.services import image_model_upsert
from upstreams.models import Upstream
from upstreams.services import upstream_upsert

# A plain model: one size, PNG only, one image a call; tests override what they exercise.
MODEL_DEFAULTS: dict[str, Any] = {
    "upstream_model": "",
    "sizes": ["1024x1024"],
    "qualities": [],
    "styles": [],
    "backgrounds": [],
    "output_formats": ["png"],
    "output_compression": None,
    "max_n": 1,
    "edits_supported": False,
    "stream_supported": False,
    "default_response_format": "b64_json",
    "enabled": True,
}


def image_model_make(
    *, model_id: str, group: Group, upstreams: list[Upstream], price: str = "0.02", **overrides: Any
) -> ImageModel:
    model, _ = image_model_upsert(
        model_id=model_id,
        group=group,
        price=Decimal(price),
        upstreams=upstreams,
        **{**MODEL_DEFAULTS, **overrides},
    )
    return model


def text_model_make(
    *,
    model_id: str,
    group: Group,
    upstreams: list[Upstream],
    input_price: str = "2.00",
    output_price: str = "8.00",
    cached_input_price: str | None = None,
    cache_write_price: str | None = None,
    cache_write_1h_price: str | None = None,
    upstream_model: str = "",
    max_output_tokens: int = 1024,
    sticky_seconds: int = 3600,
    enabled: bool = True,
) -> TextModel:
    """A text model, by default at ¥2/¥8 per million input/output tokens, its cache prices the input
    price's."""
    model, _ = text_model_upsert(
        group=group,
        model_id=model_id,
        upstream_model=upstream_model,
        input_price=Decimal(input_price),
        output_price=Decimal(output_price),
        cached_input_price=Decimal(cached_input_price) if cached_input_price is not None else None,
        cache_write_price=Decimal(cache_write_price) if cache_write_price is not None else None,
        cache_write_1h_price=Decimal(cache_write_1h_price) if cache_write_1h_price is not None else None,
        max_output_tokens=max_output_tokens,
        sticky_seconds=sticky_seconds,
        enabled=enabled,
        upstreams=upstreams,
    )
    return model


def upstream_make(
    *,
    name: str,
    base_url: str,
    api_key_env: str,
    kind: str = "openai",
    timeout_seconds: int = 30,
    priority: int = 0,
    weight: int = 1,
) -> Upstream:
    """An enabled upstream (by default OpenAI-compatible), e.g. in front of the fake upstream process."""
    upstream, _ = upstream_upsert(
        name=name,
        kind=kind,
        base_url=base_url,
        api_key_env=api_key_env,
        timeout_seconds=timeout_seconds,
        priority=priority,
        weight=weight,
        enabled=True,
    )
    return upstream


def alpha_group_make(*, rpm: int = 0, concurrency: int = 0) -> Group:
    """Alpha-Image (group 1, balance billing, override allowed) with the given limits."""
    group, _ = group_upsert(
        group_id=1,
        name="Alpha-Image",
        status="active",
        image_enabled=True,
        billing="balance",
        allow_group_override=True,
        rpm=rpm,
        concurrency=concurrency,
    )
    return group
