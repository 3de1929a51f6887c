"""Reads of the text models groups offer, served from per-process caches of snapshots (as
images/selectors.py does for image models): every write to a text model or its upstream list bumps
the shared configuration generation (registered in chat/apps.py)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from api.catalog import CatalogModel
from chat.models import TextModel
from chat.snapshots import TextModelSnapshot
from core.config_cache import GenerationCache

_group_models: GenerationCache[Mapping[str, TextModelSnapshot]] = GenerationCache(name="group_text_models")
_enabled_model_ids: GenerationCache[frozenset[str]] = GenerationCache(name="enabled_text_model_ids")


def group_text_models_enabled(*, group_id: int) -> Mapping[str, TextModelSnapshot]:
    """The group's enabled text models by model id, in `model_id` order."""
    return _group_models.get_or_load(group_id, lambda: _group_text_models_load(group_id=group_id))


def text_model_ids_enabled() -> frozenset[str]:
    """Every model id that some group offers enabled (to tell 403 model_not_allowed from 404)."""
    return _enabled_model_ids.get_or_load("all", _text_model_ids_load)


def text_models_catalog(*, group_id: int) -> list[CatalogModel]:
    """The group's enabled text models as GET /v1/models lists them (api.catalog)."""
    return [
        CatalogModel(model_id=model.model_id, created=model.created_at)
        for model in group_text_models_enabled(group_id=group_id).values()
    ]


def _group_text_models_load(*, group_id: int) -> Mapping[str, TextModelSnapshot]:
    models = (
        TextModel.objects.select_related("group").filter(group_id=group_id, enabled=True).order_by("model_id")
    )
    return MappingProxyType({model.model_id: TextModelSnapshot.from_model(model) for model in models})


def _text_model_ids_load() -> frozenset[str]:
    return frozenset(TextModel.objects.filter(enabled=True).values_list("model_id", flat=True).distinct())
