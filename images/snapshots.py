"""What a call reads of an image model: an immutable snapshot, shared by every thread of a process
through the configuration cache (images/selectors.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import ClassVar

from groups.snapshots import GroupSnapshot
from images.models import ImageModel


@dataclass(frozen=True, slots=True)
class ImageModelSnapshot:
    """An image model's price, upstream name and capabilities (lists as tuples), with its group."""

    model_label: ClassVar[str] = "images.ImageModel"  # routing names the model by it (upstreams.routing)
    id: int
    model_id: str
    group: GroupSnapshot
    price: Decimal
    upstream_model_name: str
    sizes: tuple[str, ...]
    qualities: tuple[str, ...]
    styles: tuple[str, ...]
    backgrounds: tuple[str, ...]
    output_formats: tuple[str, ...]
    output_compression_range: tuple[int, int] | None
    max_n: int
    edits_supported: bool
    stream_supported: bool
    default_response_format: str
    created_at: datetime

    @property
    def pk(self) -> int:
        return self.id

    @property
    def group_id(self) -> int:
        return self.group.id

    @classmethod
    def from_model(cls, image_model: ImageModel) -> ImageModelSnapshot:
        """From an image model (its group loaded with it saves a query)."""
        return cls(
            id=image_model.pk,
            model_id=image_model.model_id,
            group=GroupSnapshot.from_model(image_model.group),
            price=image_model.price,
            upstream_model_name=image_model.upstream_model_name,
            sizes=tuple(image_model.sizes or ()),
            qualities=tuple(image_model.qualities or ()),
            styles=tuple(image_model.styles or ()),
            backgrounds=tuple(image_model.backgrounds or ()),
            output_formats=tuple(image_model.output_formats or ()),
            output_compression_range=image_model.output_compression_range,
            max_n=image_model.max_n,
            edits_supported=image_model.edits_supported,
            stream_supported=image_model.stream_supported,
            default_response_format=image_model.default_response_format,
            created_at=image_model.created_at,
        )
