"""Reads of the image models groups offer, served from per-process caches of snapshots.

The entries live in `GenerationCache`s (core/config_cache.py): valid while the shared configuration
generation is unchanged, and every write to an image model (and to a model's upstream list) bumps it
after commit, so the next call on every process reads the new rows. Without Redis every read queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from api.catalog import CatalogModel
from core.config_cache import GenerationCache
from images.models import ImageModel
from images.snapshots import ImageModelSnapshot

# Keyed by group id; bounded by the number of groups, so unknown model names cost no memory.
_group_models: GenerationCache[Mapping[str, ImageModelSnapshot]] = GenerationCache(name="group_image_models")
# One entry: bounded by the configuration, not by what callers send.
_enabled_model_ids: GenerationCache[frozenset[str]] = GenerationCache(name="enabled_image_model_ids")


def group_image_models_enabled(*, group_id: int) -> Mapping[str, ImageModelSnapshot]:
    """The group's enabled image models by model id, in the database's `model_id` order."""
    return _group_models.get_or_load(group_id, lambda: _group_image_models_load(group_id=group_id))


def image_model_ids_enabled() -> frozenset[str]:
    """Every model id that some group offers enabled (to tell 403 model_not_allowed from 404)."""
    return _enabled_model_ids.get_or_load("all", _image_model_ids_load)


def image_models_catalog(*, group_id: int) -> list[CatalogModel]:
    """The group's enabled image models as GET /v1/models lists them (api.catalog)."""
    return [
        CatalogModel(model_id=model.model_id, created=model.created_at)
        for model in group_image_models_enabled(group_id=group_id).values()
    ]


def _group_image_models_load(*, group_id: int) -> Mapping[str, ImageModelSnapshot]:
    models = (
        ImageModel.objects.select_related("group")
        .filter(group_id=group_id, enabled=True)
        .order_by("model_id")
    )
    return MappingProxyType(
        {image_model.model_id: ImageModelSnapshot.from_model(image_model) for image_model in models}
    )


def _image_model_ids_load() -> frozenset[str]:
    return frozenset(ImageModel.objects.filter(enabled=True).values_list("model_id", flat=True).distinct())
