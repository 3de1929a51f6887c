"""Which image model serves a request: the image endpoints' access decision, on the group that
`keys.group_access` resolves for the credential (after its `models_invoke_check`).

- The serving group must be image-enabled (403 permission_error `image_group_required`).
- The model must be an enabled image model of that group: unknown everywhere 404 model_not_found,
  known in another group 403 model_not_allowed.
- A key with a `models` list must name it there (`keys.group_access.key_model_check`): 403
  model_not_allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.errors import (
    IMAGE_GROUP_REQUIRED,
    MISSING_REQUIRED_PARAMETER,
    MODEL_NOT_ALLOWED,
    MODEL_NOT_FOUND,
    InvalidRequest,
    NotFound,
    PermissionDenied,
)
from groups.snapshots import GroupSnapshot
from images.selectors import group_image_models_enabled, image_model_ids_enabled
from images.snapshots import ImageModelSnapshot
from keys.credentials import Credential
from keys.group_access import group_resolve_for_credential, key_model_check, models_invoke_check

Operation = Literal["generate", "edit"]


@dataclass(frozen=True)
class ResolvedModel:
    group: GroupSnapshot
    image_model: ImageModelSnapshot
    model_name: str


def _shown(name: str) -> str:
    return name if len(name) <= 200 else name[:200] + "…"


def model_resolve_for_group(*, group: GroupSnapshot, model_name: str) -> ImageModelSnapshot:
    """The group's enabled image model called `model_name`; 404 if no group has it, 403 if others do.

    Served from the per-process configuration cache (images/selectors.py)."""
    image_model = group_image_models_enabled(group_id=group.pk).get(model_name)
    if image_model is not None:
        return image_model
    if model_name in image_model_ids_enabled():
        raise PermissionDenied(
            f"The model {_shown(model_name)!r} is not available in your group {group.name!r}; "
            "GET /v1/models lists the models you may use.",
            code=MODEL_NOT_ALLOWED,
        )
    raise NotFound(
        f"The model {_shown(model_name)!r} does not exist; GET /v1/models lists the models you may use.",
        code=MODEL_NOT_FOUND,
        param="model",
    )


def image_model_resolve(
    *, credential: Credential, requested_model: object, operation: Operation
) -> ResolvedModel:
    """May this credential use this image model, and in which group? The one place that decides."""
    if operation not in ("generate", "edit"):
        raise ValueError(f"unknown image operation {operation!r}")
    models_invoke_check(credential=credential)
    if not isinstance(requested_model, str) or not requested_model.strip():
        raise InvalidRequest(
            "You must provide a model parameter (a model id from GET /v1/models).",
            param="model",
            code=MISSING_REQUIRED_PARAMETER,
        )
    selection = group_resolve_for_credential(credential=credential, requested_model=requested_model)
    group = selection.group
    model_name = selection.model_name or ""
    if not group.image_enabled:
        raise PermissionDenied(
            f"The group {group.name!r} does not serve the image endpoints; use a key bound to an "
            "image-enabled group.",
            code=IMAGE_GROUP_REQUIRED,
        )
    image_model = model_resolve_for_group(group=group, model_name=model_name)
    key_model_check(credential=credential, model_id=image_model.model_id)
    return ResolvedModel(group=group, image_model=image_model, model_name=model_name)
