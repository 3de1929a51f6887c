from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from django.core.exceptions import ValidationError

from chat.models import TextModel, image_model_exists
from core.modelutils import model_upsert
from groups.models import Group
from upstreams.models import Upstream


def text_model_upsert(
    *,
    group: Group,
    model_id: str,
    upstream_model: str,
    input_price: Decimal,
    output_price: Decimal,
    cached_input_price: Decimal | None,
    cache_write_price: Decimal | None,
    max_output_tokens: int,
    enabled: bool,
    cache_write_1h_price: Decimal | None = None,
    sticky_seconds: int = 3600,
    upstreams: Sequence[Upstream],
) -> tuple[TextModel, str]:
    """Create the group's text model `model_id`, or update only what differs; returns it with
    "created", "updated" or "unchanged", so that applying the same values twice writes nothing.

    Refuses (ValidationError, nothing written) what no column can: no upstream, and an id the group
    already has as an image model. Upstreams of any kinds may serve it: a call is translated for each
    upstream it tries (chat/translation.py). A blank
    `upstream_model` sends the model id upstream; a None cached-input or cache-write price charges
    the input price. `sticky_seconds` keeps a conversation on the upstream that answered it
    (upstreams/affinity.py; 0 = off)."""
    if not upstreams:
        raise ValidationError({"upstreams": "A text model needs at least one upstream."})
    if image_model_exists(group_id=group.pk, model_id=model_id):
        raise ValidationError({"model_id": f"The group already has an image model called {model_id!r}."})
    text_model, outcome = model_upsert(
        TextModel,
        lookup={"model_id": model_id, "group": group},
        values={
            "upstream_model": upstream_model,
            "input_price": input_price,
            "output_price": output_price,
            "cached_input_price": cached_input_price,
            "cache_write_price": cache_write_price,
            "cache_write_1h_price": cache_write_1h_price,
            "max_output_tokens": max_output_tokens,
            "sticky_seconds": sticky_seconds,
            "enabled": enabled,
        },
    )
    wanted = {upstream.pk for upstream in upstreams}
    if set(text_model.upstreams.values_list("pk", flat=True)) != wanted:
        text_model.upstreams.set(upstreams)
        outcome = "created" if outcome == "created" else "updated"
    return text_model, outcome
