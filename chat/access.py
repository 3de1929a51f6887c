"""Which text model serves a request, and whether its upstreams serve the endpoint asked.

After `keys.group_access.models_invoke_check` (OAuth tokens need `models:invoke`), on the group
`keys.group_access` resolves for the credential (states, `<group_id>:<model>`):
- the model must be an enabled text model of that group: unknown everywhere 404 `model_not_found`,
  known in another group 403 `model_not_allowed`;
- a key with a `models` list must name it there (`keys.group_access.key_model_check`, by the id the
  caller named, whichever family serves the model): 403 `model_not_allowed`;
- each of its upstreams' kinds must serve the endpoint, natively (an `openai` upstream serves chat completions
  and responses, `openai-compatible` chat completions, an `anthropic` one messages and token
  counting, `demo` all four) or through a translator (chat/translation.py: messages on a chat
  completions upstream): else 400 `unsupported_endpoint` naming the endpoints the model does serve.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from chat.families import FAMILIES, Family
from chat.selectors import group_text_models_enabled, text_model_ids_enabled
from chat.snapshots import TextModelSnapshot
from chat.translation import Translation, translation_for
from core.errors import MODEL_NOT_ALLOWED, MODEL_NOT_FOUND, InvalidRequest, NotFound, PermissionDenied
from groups.snapshots import GroupSnapshot
from keys.credentials import Credential
from keys.group_access import group_resolve_for_credential, key_model_check, models_invoke_check
from upstreams.affinity import Affinity, affinity_make
from upstreams.routing import upstreams_route
from upstreams.snapshots import UpstreamSnapshot

UNSUPPORTED_ENDPOINT = "unsupported_endpoint"


@dataclass(frozen=True)
class ResolvedTextModel:
    group: GroupSnapshot
    text_model: TextModelSnapshot
    upstreams: list[UpstreamSnapshot]  # in the order this call tries them
    translations: dict[str, Translation]  # how each kind among them serves the caller's family
    # The call's conversation, when it names one and stickiness has a choice to make.
    affinity: Affinity | None = None

    @property
    def translates(self) -> bool:
        """Some upstream of the model is sent a translated body."""
        return any(translation.translator is not None for translation in self.translations.values())

    @property
    def serves_natively(self) -> bool:
        """Some upstream of the model is sent the caller's body as it came."""
        return any(translation.translator is None for translation in self.translations.values())

    def narrowed(self, *, translated: bool) -> ResolvedTextModel:
        """The model with only its upstreams that are sent a translated body, or only the others."""
        kinds = {
            kind
            for kind, translation in self.translations.items()
            if (translation.translator is not None) is translated
        }
        return replace(
            self,
            upstreams=[upstream for upstream in self.upstreams if upstream.kind in kinds],
            translations={kind: self.translations[kind] for kind in kinds},
        )

    @property
    def counted_locally(self) -> bool:
        """Token counting done by the gateway: some upstream of the model cannot count."""
        return any(translation.counted_locally for translation in self.translations.values())


def _shown(name: str) -> str:
    return name if len(name) <= 200 else name[:200] + "…"


def text_model_resolve(
    *, credential: Credential, requested_model: str, family: Family, conversation_key: str | None = None
) -> ResolvedTextModel:
    """May this credential use this text model on this endpoint, and in which group? The one place
    that decides. The upstreams come in the order the call tries them: first, among those of a
    priority, the one that answered the conversation `conversation_key` names (upstreams/affinity.py)
    within the model's `sticky_seconds`."""
    models_invoke_check(credential=credential)
    selection = group_resolve_for_credential(credential=credential, requested_model=requested_model)
    group = selection.group
    model_name = selection.model_name or ""
    text_model = group_text_models_enabled(group_id=group.pk).get(model_name)
    if text_model is None:
        if model_name in text_model_ids_enabled():
            raise PermissionDenied(
                f"The model {_shown(model_name)!r} is not available in your group {group.name!r}; "
                "GET /v1/models lists the models you may use.",
                code=MODEL_NOT_ALLOWED,
            )
        raise NotFound(
            f"The model {_shown(model_name)!r} does not exist or is not a text model; GET /v1/models "
            "lists the models you may use.",
            code=MODEL_NOT_FOUND,
            param="model",
        )
    key_model_check(credential=credential, model_id=text_model.model_id)
    affinity = affinity_make(
        model_label=text_model.model_label,
        model_pk=text_model.pk,
        conversation_key=conversation_key,
        seconds=text_model.sticky_seconds,
    )
    routed = upstreams_route(model_label=text_model.model_label, model_pk=text_model.pk, affinity=affinity)
    upstreams = routed.upstreams
    kinds = sorted({upstream.kind for upstream in upstreams})
    translations = {kind: translation_for(family=family, kind=kind) for kind in kinds}
    if any(translation is None for translation in translations.values()):
        served = [f.path for f in FAMILIES if all(translation_for(family=f, kind=k) for k in kinds)]
        raise InvalidRequest(
            f"The model {_shown(model_name)!r} is not served on {family.path}; use "
            f"{' or '.join(served) or 'another endpoint'}.",
            param="model",
            code=UNSUPPORTED_ENDPOINT,
        )
    return ResolvedTextModel(
        group=group,
        text_model=text_model,
        upstreams=upstreams,
        translations={kind: translation for kind, translation in translations.items() if translation},
        affinity=routed.affinity,
    )
