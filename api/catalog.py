"""GET /v1/models across the endpoint families: each family registers where its models come from
(`model_source_register`, from its AppConfig.ready), so this app lists them without importing any.

Which groups are listed, and under which id, is the groups app's decision
(`keys.group_access.groups_listed_for_credential`); this module only puts the families' models under it,
leaving out those an API key's own `models` list does not name (`keys.group_access.key_model_allowed`):
such a model is neither listed nor found by id, as if it did not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from groups.snapshots import GroupSnapshot
from keys.credentials import SCOPE_MODELS_INVOKE, Credential
from keys.errors import KeyLimitsInvalid
from keys.group_access import groups_listed_for_credential, key_model_allowed


@dataclass(frozen=True)
class CatalogModel:
    """One enabled model of a group, as a family reports it."""

    model_id: str
    created: datetime


@dataclass(frozen=True)
class ListedModel:
    """One entry of GET /v1/models: `id` is exactly what the caller sends as `model` to use it, when
    `selectable`; otherwise (an allowed group no request can select) the plain model id."""

    id: str
    model: CatalogModel
    group: GroupSnapshot
    selectable: bool = True


ModelSource = Callable[..., Iterable[CatalogModel]]  # called as source(group_id=...)
_sources: list[ModelSource] = []


def model_source_register(source: ModelSource) -> None:
    """Add a family's models to GET /v1/models; `source(group_id=...)` returns a group's enabled ones."""
    if source not in _sources:
        _sources.append(source)


def model_list_for_credential(*, credential: Credential, all_groups: bool = False) -> list[ListedModel]:
    """The models this credential may use, as GET /v1/models lists them: the listed groups in id
    order, each group's models by model id (for a key with a `models` list, only those)."""
    listed: list[ListedModel] = []
    for entry in groups_listed_for_credential(credential=credential, all_groups=all_groups):
        group = entry.group
        models = sorted(
            (
                model
                for source in _sources
                for model in source(group_id=group.pk)
                if key_model_allowed(credential=credential, model_id=model.model_id)
            ),
            key=lambda model: model.model_id,
        )
        for model in models:
            model_id = f"{group.pk}:{model.model_id}" if entry.prefixed else model.model_id
            listed.append(ListedModel(id=model_id, model=model, group=group, selectable=entry.selectable))
    return listed


def model_get_for_credential(*, credential: Credential, model_id: str) -> ListedModel | None:
    """The model GET /v1/models lists for this credential under `model_id`, or None: the serving
    group's by plain id, then (OAuth tokens with `models:invoke`) another allowed group's by
    `<group_id>:<model>`. A model no request can select has no detail."""
    wider = credential.kind == "oauth" and credential.has_scope(SCOPE_MODELS_INVOKE)
    for all_groups in (False, True) if wider else (False,):
        for listed in model_list_for_credential(credential=credential, all_groups=all_groups):
            if listed.selectable and listed.id == model_id:
                return listed
    return None


def group_model_ids(*, group_id: int) -> frozenset[str]:
    """The ids of the group's enabled models across the families (what its keys may list)."""
    return frozenset(model.model_id for source in _sources for model in source(group_id=group_id))


def key_models_check(*, group_id: int, model_ids: Iterable[str]) -> None:
    """KeyLimitsInvalid (param `models`, 400 invalid_value) naming the ids among `model_ids` that are
    not enabled models of the group: a key's `models` lists models of the key's group only.
    Registered with keys.services.api_key_models_check, which every surface setting a key's limits
    calls."""
    wanted = {str(model_id).strip() for model_id in model_ids} - {""}
    offered = group_model_ids(group_id=group_id)
    unknown = sorted(wanted - offered)
    if unknown:
        known = sorted(offered)
        raise KeyLimitsInvalid(
            f"{', '.join(unknown)} {'is not a model' if len(unknown) == 1 else 'are not models'} of the "
            f"key's group; its models: {', '.join(known) if known else 'none'}.",
            param="models",
        )
