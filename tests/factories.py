"""Builders for test data, through the project's own services."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from groups.models import Group
from images.models import ImageModel, Upstream
from images.services import image_model_upsert

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
