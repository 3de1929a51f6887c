"""What a call reads of a text model: an immutable snapshot, shared by every thread of a process
through the configuration cache (chat/selectors.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import ClassVar

from chat.models import TextModel
from groups.snapshots import GroupSnapshot


@dataclass(frozen=True, slots=True)
class TextModelSnapshot:
    """A text model's prices (¥ per million tokens, the optional ones resolved), limits and group."""

    model_label: ClassVar[str] = "chat.TextModel"  # routing names the model by it (upstreams.routing)
    id: int
    model_id: str
    group: GroupSnapshot
    upstream_model_name: str
    input_price: Decimal
    output_price: Decimal
    cached_input_price: Decimal
    cache_write_price: Decimal
    cache_write_1h_price: Decimal
    max_output_tokens: int
    sticky_seconds: int  # how long a conversation keeps its upstream (upstreams/affinity.py); 0 = off
    created_at: datetime

    @property
    def pk(self) -> int:
        return self.id

    @property
    def group_id(self) -> int:
        return self.group.id

    @classmethod
    def from_model(cls, text_model: TextModel) -> TextModelSnapshot:
        """From a text model (its group loaded with it saves a query)."""
        input_price = text_model.input_price
        return cls(
            id=text_model.pk,
            model_id=text_model.model_id,
            group=GroupSnapshot.from_model(text_model.group),
            upstream_model_name=text_model.upstream_model_name,
            input_price=input_price,
            output_price=text_model.output_price,
            cached_input_price=(
                text_model.cached_input_price if text_model.cached_input_price is not None else input_price
            ),
            cache_write_price=(
                text_model.cache_write_price if text_model.cache_write_price is not None else input_price
            ),
            # Anthropic lists a one-hour cache write at twice the input price.
            cache_write_1h_price=(
                text_model.cache_write_1h_price
                if text_model.cache_write_1h_price is not None
                else 2 * input_price
            ),
            max_output_tokens=text_model.max_output_tokens,
            sticky_seconds=text_model.sticky_seconds,
            created_at=text_model.created_at,
        )
