"""The image playground: try one of the account's image models; the call is billed like an API call
(images.pipeline), its result has an address of its own and the session keeps references to its
images, never the images."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from api.answers import CallAnswer
from api.errors import api_error_for
from billing.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from billing.money import money_display
from console import queries
from console.forms import PlaygroundForm, form_token_new
from console.views.base import ConsoleView
from console.views.playground import PlainError, answer_error, console_credential, plain_error
from core.errors import ApiError, DomainError
from images.hosting import hosted_image_path, hosted_image_public_id
from images.pipeline import image_generation_answer
from keys.credentials import Credential

PLAYGROUND_RESULT_SESSION = "console.playground_result"
# The playground's idempotency keys, apart from any key an API client could choose.
PLAYGROUND_KEY_PREFIX = "console-playground:"
# A second POST of a form whose call is still running waits for its answer (a double click).
PLAYGROUND_WAIT_SECONDS = 120
HOSTED, LINKED = "hosted", "url"


@dataclass(frozen=True)
class PlaygroundImage:
    src: str
    revised_prompt: str


class PlaygroundView(ConsoleView):
    section = "playground"
    path = "/console/playground"

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._page(form=self._form(selected=request.GET.get("model")))

    def post(self, request: HttpRequest) -> HttpResponse:
        if "choose" in request.POST:
            # Without the page's script: the form again, for the model selected, nothing is called.
            return self._page(form=self._form(initial=_chosen(request.POST)))
        form = self._form(data=request.POST)
        if not form.is_valid():
            return self._page(form=form, status=400)
        image_model = form.cleaned_data["model"]
        request_id = request.request_id
        token = form.cleaned_data["form_token"]
        idempotency_key = playground_idempotency_key(token) if token else None
        try:
            answer = playground_call_run(
                credential=console_credential(account=self.account, group=image_model.group),
                data=form.request_body(),
                request_id=request_id,
                idempotency_key=idempotency_key,
                path=self.path,
            )
        except IdempotencyKeyReused:
            # This form was sent before with other values (back, edit, send): a new form.
            return self._page(
                form=self._form(data=_with_new_token(request.POST)),
                error=PlainError(
                    headline="This form was already sent; its first result stands.",
                    detail="Your changes are kept: send the form again to make a new call.",
                ),
                request_id=request_id,
                status=409,
            )
        except (ApiError, DomainError) as refused:
            error = api_error_for(refused)
            return self._page(form=form, error=plain_error(error), request_id=request_id, status=error.status)
        if idempotency_key and answer.replayed:
            # The same form sent twice: the first call's answer, charged once, under its request id.
            request_id = (
                queries.idempotency_reference_for_key(account=self.account, key=idempotency_key) or request_id
            )
        if not answer.ok:
            return self._page(
                form=form, error=answer_error(answer), request_id=request_id, status=answer.status
            )
        playground_result_keep(
            request=request,
            result={
                "request_id": request_id,
                "model": image_model.pk,
                "model_id": image_model.model_id,
                "prompt": form.cleaned_data["prompt"],
                "size": form.cleaned_data.get("size") or "",
                "quality": form.cleaned_data.get("quality") or "",
                "output_format": form.cleaned_data.get("output_format") or "",
                "n": form.cleaned_data["n"],
                "images": playground_image_refs(answer.body.get("data", [])),
            },
        )
        # POST-redirect-GET: reloading the result shows it again; it does not run (or charge) again.
        return redirect("console:playground-result", request_id=request_id)

    def _form(self, data=None, initial=None, selected: str | None = None) -> PlaygroundForm:
        return PlaygroundForm(
            data,
            initial=initial,
            selected=selected,
            image_models=queries.playground_models_for_account(account=self.account),
        )

    def _page(self, *, form: PlaygroundForm, status: int = 200, **extra: Any) -> HttpResponse:
        return self.render("console/playground.html", {"form": form, **extra}, status=status)


class PlaygroundResultView(PlaygroundView):
    """The last playground result of this session, at its own address: a reload shows it again."""

    def get(self, request: HttpRequest, request_id: str) -> HttpResponse:
        result = request.session.get(PLAYGROUND_RESULT_SESSION)
        if not result or result.get("request_id") != request_id:
            return self._page(form=self._form(), gone=True, request_id=request_id, status=404)
        usage = queries.usage_record_for_request(account=self.account, request_id=request_id)
        form = self._form(
            initial={
                key: result.get(key) for key in ("model", "prompt", "size", "quality", "output_format", "n")
            },
        )
        return self._page(
            form=form,
            images=playground_images_shown(result["images"]),
            result_model_id=result["model_id"],
            result_prompt=result["prompt"],
            usage=usage,
            usage_amount=money_display(usage.amount) if usage is not None else "",
            request_id=request_id,
            has_result=True,
        )

    def post(self, request: HttpRequest, request_id: str) -> HttpResponse:
        return redirect("console:playground")


def playground_idempotency_key(form_token: str) -> str:
    return f"{PLAYGROUND_KEY_PREFIX}{form_token}"


def playground_call_run(
    *, credential: Credential, data: dict, request_id: str, idempotency_key: str | None, path: str
) -> CallAnswer:
    """The billed image call of one playground form, keyed by its form token: the same form sent again
    replays the first answer (charged once); sent while the first still runs, it waits for it."""
    deadline = time.monotonic() + PLAYGROUND_WAIT_SECONDS
    while True:
        try:
            return image_generation_answer(
                credential=credential,
                data=data,
                request_id=request_id,
                idempotency_key=idempotency_key,
                path=path,
            )
        except IdempotencyKeyInUse:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1)


def playground_result_keep(*, request: HttpRequest, result: dict) -> None:
    """Keep the session's last playground result (one only: a new one replaces it): what was asked and
    references to its images (playground_image_refs), a few hundred bytes whatever the images' size."""
    request.session[PLAYGROUND_RESULT_SESSION] = result


def playground_image_refs(items: list[dict[str, Any]]) -> list[list[str]]:
    """References to the images of an image result asked for as links (its `data` items): [HOSTED,
    public id hex, revised prompt] for an image the gateway hosts, [LINKED, url, revised prompt] for an
    upstream's own link. What the session keeps, instead of the images."""
    refs = []
    for item in items:
        url = item.get("url") or ""
        if not url.startswith(("https://", "http://")):
            continue  # never hand the browser a data: or javascript: URL
        revised = item.get("revised_prompt") or ""
        public_id = hosted_image_public_id(url=url)
        refs.append([HOSTED, public_id.hex, revised] if public_id is not None else [LINKED, url, revised])
    return refs


def playground_images_shown(refs: list[list[str]]) -> list[PlaygroundImage]:
    """The images of a kept result, each hosted one by a fresh link (a reload after the first link
    expired still shows it) while the gateway keeps it; one purged since is left out."""
    hosted = queries.hosted_images_stored(public_ids=[value for kind, value, _ in refs if kind == HOSTED])
    images = []
    for kind, value, revised in refs:
        if kind == HOSTED:
            if value not in hosted:
                continue
            src = hosted_image_path(public_id=uuid.UUID(hex=value))
        else:
            src = value
        images.append(PlaygroundImage(src=src, revised_prompt=revised))
    return images


def _chosen(data: Any) -> dict[str, Any]:
    """What a "Choose model" POST keeps: the model and the prompt typed so far."""
    return {"model": data.get("model"), "prompt": data.get("prompt", "")}


def _with_new_token(data: Any) -> Any:
    fresh = data.copy()
    fresh["form_token"] = form_token_new()
    return fresh
