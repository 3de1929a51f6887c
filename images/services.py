from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from django.core.exceptions import ValidationError

from core.modelutils import model_upsert
from groups.models import Group
from images.models import ImageModel, text_model_exists
from upstreams.models import Upstream


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
    if text_model_exists(group_id=group.pk, model_id=model_id):
        raise ValidationError({"model_id": f"The group already has a text model called {model_id!r}."})
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
