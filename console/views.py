"""The web console: the signed-in user's own account, keys, usage, playground and OAuth grants.

Views are thin: they read through console.queries, write through the owning app's services
(keys.services) and run playground calls through images.pipeline, so a playground call is billed and
logged exactly like an API call. Every object is looked up within the signed-in account: another
account's id is a 404, never a 403 that would confirm it exists.
"""

from __future__ import annotations

import csv
import functools
import json
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.mixins import LoginRequiredMixin
from django.contrib.staticfiles import finders
from django.core.exceptions import ImproperlyConfigured
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import cache_control, never_cache

from accounts.models import Account
from accounts.snapshots import AccountSnapshot
from api.answers import event_stream_response
from billing.idempotency import REPLAY_HEADER, StoredResponse, idempotent_execute
from billing.money import money_display, money_str
from chat.families import CHAT
from chat.pipeline import text_call_run
from chat.streaming import StreamedTextCall
from console import queries
from console.forms import (
    ApiKeyCreateForm,
    ChatPlaygroundForm,
    ConsoleAuthenticationForm,
    PlaygroundForm,
    UsageFilterForm,
    form_token_new,
)
from core.errors import ApiError, Conflict
from groups.snapshots import GroupSnapshot
from images.hosting import hosted_image_path, hosted_image_public_id
from images.pipeline import image_call_run
from keys.credentials import Credential
from keys.services import (
    ApiKeyGroupNotAllowed,
    api_key_create,
    api_key_revoke,
    oauth_application_revoke_for_user,
)

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
FAVICON = "console/favicon.ico"
FAVICON_MAX_AGE = 7 * 24 * 3600


@functools.cache
def _favicon_bytes() -> bytes:
    path = finders.find(FAVICON)
    if path is None:
        raise ImproperlyConfigured(f"the static file {FAVICON} is missing")
    return Path(path).read_bytes()


@cache_control(public=True, max_age=FAVICON_MAX_AGE)
def favicon(request: HttpRequest) -> HttpResponse:
    """`/favicon.ico`, which browsers ask for on every site whatever the page says: served from the
    console's static files by the gateway itself, as the static files are not served in production."""
    return HttpResponse(_favicon_bytes(), content_type="image/x-icon")


def password_reset_enabled() -> bool:
    """Password reset mails need somewhere to go: an SMTP host, or a non-SMTP backend (console, tests)."""
    return settings.EMAIL_BACKEND != SMTP_BACKEND or bool(settings.EMAIL_HOST)


# --- Signing in and out ------------------------------------------------------------------------------


class ConsoleLoginView(auth_views.LoginView):
    template_name = "registration/console_login.html"
    authentication_form = ConsoleAuthenticationForm
    redirect_authenticated_user = True
    extra_context = {"password_reset_enabled": password_reset_enabled}

    def form_invalid(self, form: ConsoleAuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        if form.throttled():
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after)
        return response


class ConsoleLogoutView(auth_views.LogoutView):
    next_page = "login"


class EmailRequiredMixin:
    """Password reset pages exist only where email is configured (404 otherwise)."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not password_reset_enabled():
            raise Http404("Password reset is not available: no email is configured.")
        return super().dispatch(request, *args, **kwargs)


class PasswordResetView(EmailRequiredMixin, auth_views.PasswordResetView):
    template_name = "registration/password_reset_form.html"
    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"


class PasswordResetDoneView(EmailRequiredMixin, auth_views.PasswordResetDoneView):
    template_name = "registration/password_reset_done.html"


class PasswordResetConfirmView(EmailRequiredMixin, auth_views.PasswordResetConfirmView):
    template_name = "registration/password_reset_confirm.html"


class PasswordResetCompleteView(EmailRequiredMixin, auth_views.PasswordResetCompleteView):
    template_name = "registration/password_reset_complete.html"


# --- The console pages -------------------------------------------------------------------------------


@method_decorator(never_cache, name="dispatch")
class ConsoleView(LoginRequiredMixin, View):
    """A console page: a signed-in user with an account (self.account); nothing is cached."""

    login_url = reverse_lazy("login")
    section = ""
    account: Account

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        account = queries.account_for_user(user=request.user)
        if account is None:
            return render(request, "console/no_account.html", {"section": self.section}, status=403)
        self.account = account
        return super().dispatch(request, *args, **kwargs)

    def render(self, template: str, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
        base = {
            "account": self.account,
            "section": self.section,
            "gateway_timezone": settings.GATEWAY_TIMEZONE,
        }
        return render(self.request, template, {**base, **context}, status=status)


class OverviewView(ConsoleView):
    section = "overview"

    def get(self, request: HttpRequest) -> HttpResponse:
        account = self.account
        spend = queries.spend_per_day_for_account(account=account)
        spend_models, spend_by_model = queries.spend_per_day_by_model_for_account(account=account)
        return self.render(
            "console/overview.html",
            {
                "wallet": queries.wallet_state_for_account(account=account),
                "allowed_groups": sorted(account.allowed_groups.all(), key=lambda group: group.pk),
                "subscriptions": queries.subscriptions_for_account(account=account),
                "spend": spend,
                "chart": spend_chart(spend, by_model=spend_by_model, models=spend_models),
                "calls": queries.latest_calls_for_account(account=account),
            },
        )


class ApiKeysView(ConsoleView):
    section = "keys"

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._page(form=self._form(), **new_key_take(request=request, account=self.account))

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(data=request.POST)
        if not form.is_valid():
            return self._page(form=form, status=400)
        created: dict[str, Any] = {}

        def produce() -> StoredResponse:
            api_key, secret = api_key_create(
                account=self.account,
                group=form.cleaned_data["group"],
                label=form.cleaned_data["label"],
                expires_at=form.expires_at(),
            )
            created.update(api_key=api_key, secret=secret)
            # What the token's record keeps: the key's id, never its secret.
            body = json.dumps({"api_key": api_key.pk}).encode()
            return StoredResponse(status=201, body=body, content_type="application/json")

        token = form.cleaned_data["form_token"]
        try:
            # The form's token is single-use: of several POSTs of one form (a double click, back and
            # send, two at once), the one that inserts the token's row creates the key.
            idempotent_execute(
                account=self.account,
                key=f"{KEY_FORM_KEY_PREFIX}{token}" if token else None,
                fingerprint=KEY_FORM_FINGERPRINT,
                produce=produce,
            )
        except ApiKeyGroupNotAllowed:
            # The form offers allowed groups only; an operator took this one away since.
            form.add_error("group", "Your account may no longer use this group.")
            return self._page(form=form, status=400)
        except Conflict as conflict:
            if conflict.code != "idempotency_key_in_use":
                raise
        if not created:
            # The same form sent again: its key exists (or is being made); the list shows it.
            return redirect("console:keys")
        new_key_keep(request=request, api_key_id=created["api_key"].pk, secret=created["secret"])
        # POST-redirect-GET: a reload of the page shows the list, it does not create another key.
        return redirect("console:keys")

    def _form(self, data=None) -> ApiKeyCreateForm:
        return ApiKeyCreateForm(data, groups=queries.key_groups_for_account(account=self.account))

    def _page(self, *, form: ApiKeyCreateForm, status: int = 200, **extra: Any) -> HttpResponse:
        keys = queries.api_keys_for_account(account=self.account)
        return self.render("console/keys.html", {"form": form, "keys": keys, **extra}, status=status)


NEW_KEY_SESSION = "console.new_key"
# The key form's token as an idempotency key of the account, apart from any key an API client chooses;
# one fingerprint for every POST of a form, so a token creates one key whatever the values sent.
KEY_FORM_KEY_PREFIX = "console-key-form:"
KEY_FORM_FINGERPRINT = "console-key-form"
# The secret waits in the (server-side) session for the redirected GET only; one left behind (the
# redirect never followed) is not shown after this long.
NEW_KEY_SHOWN_FOR_SECONDS = 300


def new_key_keep(*, request: HttpRequest, api_key_id: int, secret: str) -> None:
    """Keep a new key's secret for the next GET of the keys page, which shows it once."""
    request.session[NEW_KEY_SESSION] = {"id": api_key_id, "secret": secret, "at": time.time()}


def new_key_take(*, request: HttpRequest, account: Account) -> dict[str, Any]:
    """The new key and its secret, taken out of the session: the next GET does not show it again."""
    kept = request.session.pop(NEW_KEY_SESSION, None)
    if not kept or time.time() - kept.get("at", 0) > NEW_KEY_SHOWN_FOR_SECONDS:
        return {}
    api_key = queries.api_key_for_account(account=account, api_key_id=kept["id"])
    if api_key is None:
        return {}
    return {"new_key": api_key, "secret": kept["secret"]}


class ApiKeyRevokeView(ConsoleView):
    section = "keys"

    def get(self, request: HttpRequest, api_key_id: int) -> HttpResponse:
        return self.render("console/key_revoke.html", {"api_key": self._api_key(api_key_id)})

    def post(self, request: HttpRequest, api_key_id: int) -> HttpResponse:
        api_key = self._api_key(api_key_id)
        if api_key_revoke(api_key=api_key):
            messages.success(request, f"The key {api_key} was revoked; calls with it now fail.")
        else:
            messages.info(request, f"The key {api_key} was already revoked.")
        return redirect("console:keys")

    def _api_key(self, api_key_id: int):
        api_key = queries.api_key_for_account(account=self.account, api_key_id=api_key_id)
        if api_key is None:
            raise Http404("No such key.")
        return api_key


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
            stored = playground_call_run(
                credential=console_credential(account=self.account, group=image_model.group),
                data=form.request_body(),
                request_id=request_id,
                idempotency_key=idempotency_key,
                path=self.path,
            )
        except ApiError as error:
            if error.code == "idempotency_key_reused":
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
            return self._page(
                form=form, error=_plain_error(error), request_id=request_id, status=error.status
            )
        if idempotency_key and stored.headers.get(REPLAY_HEADER) == "true":
            # The same form sent twice: the first call's answer, charged once, under its request id.
            request_id = (
                queries.idempotency_reference_for_key(account=self.account, key=idempotency_key) or request_id
            )
        if not 200 <= stored.status < 300:
            return self._page(
                form=form, error=_stored_error(stored), request_id=request_id, status=stored.status
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
                "images": playground_image_refs(stored.body),
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


PLAYGROUND_RESULT_SESSION = "console.playground_result"
# The playground's idempotency keys, apart from any key an API client could choose.
PLAYGROUND_KEY_PREFIX = "console-playground:"
# A second POST of a form whose call is still running waits for its answer (a double click).
PLAYGROUND_WAIT_SECONDS = 120


def console_credential(*, account: Account, group: Any) -> Credential:
    """The console acts as the signed-in account, in the group of the model chosen."""
    return Credential(
        kind="console",
        id=account.pk,
        account=AccountSnapshot.from_model(account),
        bound_group=GroupSnapshot.from_model(group),
        label="console",
    )


def playground_idempotency_key(form_token: str) -> str:
    return f"{PLAYGROUND_KEY_PREFIX}{form_token}"


def playground_call_run(
    *, credential: Credential, data: dict, request_id: str, idempotency_key: str | None, path: str
) -> StoredResponse:
    """The billed image call of one playground form, keyed by its form token: the same form sent again
    replays the first answer (charged once); sent while the first still runs, it waits for it."""
    deadline = time.monotonic() + PLAYGROUND_WAIT_SECONDS
    while True:
        try:
            return image_call_run(
                credential=credential,
                operation="generate",
                data=data,
                files=None,
                request_id=request_id,
                idempotency_key=idempotency_key,
                path=path,
            )
        except Conflict as conflict:
            if conflict.code != "idempotency_key_in_use" or time.monotonic() >= deadline:
                raise
            time.sleep(1)


def playground_result_keep(*, request: HttpRequest, result: dict) -> None:
    """Keep the session's last playground result (one only: a new one replaces it): what was asked and
    references to its images (playground_image_refs), a few hundred bytes whatever the images' size."""
    request.session[PLAYGROUND_RESULT_SESSION] = result


def _chosen(data: Any) -> dict[str, Any]:
    """What a "Choose model" POST keeps: the model and the prompt typed so far."""
    return {"model": data.get("model"), "prompt": data.get("prompt", "")}


def _with_new_token(data: Any) -> Any:
    fresh = data.copy()
    fresh["form_token"] = form_token_new()
    return fresh


def _stored_error(stored: StoredResponse) -> PlainError:
    """A stored non-2xx answer (a charged call whose answer was lost) in words."""
    try:
        message = json.loads(stored.body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = ""
    return PlainError(
        headline="This form's call was made and charged, but its answer could not be shown.",
        detail=message,
    )


CHAT_RESULT_SESSION = "console.chat_result"
CHAT_KEY_PREFIX = "console-chat:"


class ChatPlaygroundView(ConsoleView):
    """Try a text model: the prompt goes through chat.pipeline.text_call_run as a chat completion with
    the console's credential, billed like an API call. The page's script streams the answer through
    ChatPlaygroundStreamView; without it the form posts here and the answer has a page of its own."""

    section = "chat"

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._page(form=self._form())

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(data=request.POST)
        if not form.is_valid():
            return self._page(form=form, status=400)
        text_model = form.text_model()
        request_id = request.request_id
        token = form.cleaned_data["form_token"]
        idempotency_key = f"{CHAT_KEY_PREFIX}{token}" if token else None
        try:
            stored = text_call_run(
                credential=console_credential(account=self.account, group=text_model.group),
                family=CHAT,
                raw=form.request_body(stream=False),
                headers={},
                request_id=request_id,
                idempotency_key=idempotency_key,
            )
        except ApiError as error:
            return self._page(
                form=form,
                error=_plain_error(error, provider="text provider"),
                request_id=request_id,
                status=error.status,
            )
        if idempotency_key and stored.headers.get(REPLAY_HEADER) == "true":
            request_id = (
                queries.idempotency_reference_for_key(account=self.account, key=idempotency_key) or request_id
            )
        if not 200 <= stored.status < 300:
            return self._page(
                form=form, error=_stored_error(stored), request_id=request_id, status=stored.status
            )
        request.session[CHAT_RESULT_SESSION] = {
            "request_id": request_id,
            "model": text_model.key,
            "model_id": text_model.model_id,
            "prompt": form.cleaned_data["prompt"],
            "answer": chat_answer_text(stored.body),
        }
        return redirect("console:chat-result", request_id=request_id)

    def _form(self, data=None, initial=None) -> ChatPlaygroundForm:
        return ChatPlaygroundForm(
            data,
            initial=initial,
            text_models=queries.playground_text_models_for_account(account=self.account),
        )

    def _page(self, *, form: ChatPlaygroundForm, status: int = 200, **extra: Any) -> HttpResponse:
        return self.render("console/chat_playground.html", {"form": form, **extra}, status=status)


class ChatPlaygroundResultView(ChatPlaygroundView):
    """The session's latest chat answer (without the script), with its tokens and cost."""

    def get(self, request: HttpRequest, request_id: str) -> HttpResponse:
        result = request.session.get(CHAT_RESULT_SESSION)
        if not result or result.get("request_id") != request_id:
            return self._page(form=self._form(), gone=True, request_id=request_id, status=404)
        usage = queries.usage_record_for_request(account=self.account, request_id=request_id)
        return self._page(
            form=self._form(initial={"model": result["model"], "prompt": result["prompt"]}),
            answer=result["answer"],
            result_model_id=result["model_id"],
            usage=usage,
            usage_amount=money_display(usage.amount) if usage is not None else "",
            request_id=request_id,
        )

    def post(self, request: HttpRequest, request_id: str) -> HttpResponse:
        return redirect("console:chat")


class ChatPlaygroundStreamView(ChatPlaygroundView):
    """The chat answer as the gateway's own event stream (text/event-stream), for the page's script.
    A stream cannot be replayed, so it takes no idempotency key: the script sends it once."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return redirect("console:chat")

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(data=request.POST)
        if not form.is_valid():
            return JsonResponse({"error": {"message": _form_errors(form)}}, status=400)
        text_model = form.text_model()
        try:
            answer = text_call_run(
                credential=console_credential(account=self.account, group=text_model.group),
                family=CHAT,
                raw=form.request_body(stream=True),
                headers={},
                request_id=request.request_id,
            )
        except ApiError as error:
            plain = _plain_error(error, provider="text provider")
            return JsonResponse(
                {"error": {"headline": plain.headline, "message": plain.detail}}, status=error.status
            )
        if isinstance(answer, StreamedTextCall):
            return event_stream_response(answer.events)
        return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)


class ChatPlaygroundUsageView(ConsoleView):
    """Tokens and cost of one of the account's calls, for the script to show after a streamed answer."""

    def get(self, request: HttpRequest, request_id: str) -> HttpResponse:
        usage = queries.usage_record_for_request(account=self.account, request_id=request_id)
        if usage is None:
            raise Http404("No such call.")
        return JsonResponse(
            {
                "request_id": request_id,
                "status": usage.status,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "billing": usage.billing,
                "amount": money_display(usage.amount),
            }
        )


def chat_answer_text(body: bytes) -> str:
    """The text of a chat completion's first choice."""
    try:
        return json.loads(body)["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


def _form_errors(form: Any) -> str:
    return " ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())


@dataclass(frozen=True)
class PlainError:
    headline: str
    detail: str


def _plain_error(error: ApiError, *, provider: str = "image provider") -> PlainError:
    """A gateway refusal in words for people; the gateway's own message says what exactly."""
    if error.type == "billing_error" or error.status == 402:
        headline = "Your balance or plan does not cover this call. Nothing was charged."
    elif error.status == 429:
        headline = "Too many calls, or a usage cap was reached. Nothing was charged; try again later."
    elif error.status in (401, 403):
        headline = "Your account may not make this call."
    elif error.status == 404:
        headline = "That model is not available."
    elif error.status >= 500:
        headline = f"The {provider} did not deliver. Nothing was charged; try again in a moment."
    else:
        headline = "The gateway could not accept this request. Nothing was charged."
    return PlainError(headline=headline, detail=error.message)


HOSTED, LINKED = "hosted", "url"


def playground_image_refs(body: bytes) -> list[list[str]]:
    """References to the images of an image result asked for as links: [HOSTED, public id hex,
    revised prompt] for an image the gateway hosts, [LINKED, url, revised prompt] for an upstream's
    own link. What the session keeps, instead of the images."""
    refs = []
    for item in json.loads(body).get("data", []):
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


class UsageView(ConsoleView):
    """The account's calls, filtered, 50 a page; `?format=csv` streams every matching call as CSV."""

    section = "usage"

    def get(self, request: HttpRequest) -> HttpResponse:
        choices = queries.usage_filter_choices_for_account(account=self.account)
        form = UsageFilterForm(request.GET or None, choices=choices)
        if form.is_bound and not form.is_valid():
            return self.render("console/usage.html", {"form": form, "page": None}, status=400)
        data = form.cleaned_data if form.is_bound else {}
        filters = queries.UsageFilters(
            credential=data.get("key") or "",
            model_id=data.get("model") or "",
            status=data.get("status") or "",
            first_day=data.get("first_day"),
            last_day=data.get("last_day"),
        )
        records = queries.usage_records_for_account(account=self.account, filters=filters)
        if request.GET.get("format") == "csv":
            return self._csv(records)
        page = Paginator(records, queries.USAGE_PAGE_SIZE).get_page(request.GET.get("page"))
        rows = queries.usage_rows(account=self.account, records=page.object_list)
        query = request.GET.copy()
        query.pop("page", None)
        query.pop("format", None)
        return self.render(
            "console/usage.html",
            {"form": form, "page": page, "rows": rows, "query": query.urlencode()},
        )

    def _csv(self, records) -> StreamingHttpResponse:
        response = StreamingHttpResponse(
            usage_csv_lines(account=self.account, records=records), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="usage.csv"'
        return response


class _Echo:
    """A file-like object whose write returns the line: csv.writer formats, the response streams."""

    def write(self, value: str) -> str:
        return value


USAGE_CSV_HEADER = (
    "time",
    "request_id",
    "key",
    "model",
    "endpoint",
    "status",
    "error_code",
    "input_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "output_tokens",
    "amount",
    "billing",
)


def _csv_text(value: str) -> str:
    """Text a caller chose (a key's label, a model name, a request id) as a spreadsheet cell: one that
    starts like a formula is quoted, so opening the file never runs it (CWE-1236)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def usage_csv_lines(*, account: Account, records):
    """The CSV of the usage page: times in GATEWAY_TIMEZONE (ISO 8601), amounts as exact decimal
    strings (money_str), token counts empty for image calls."""
    writer = csv.writer(_Echo())
    zone = ZoneInfo(settings.GATEWAY_TIMEZONE)
    yield writer.writerow(USAGE_CSV_HEADER)
    names = queries.credential_names_for_account(account=account)
    for record in records.iterator(chunk_size=500):
        row = queries.usage_row(record=record, names=names)
        record = row.record
        tokens = (record.input_tokens, record.cached_tokens, record.cache_write_tokens, record.output_tokens)
        yield writer.writerow(
            (
                record.created_at.astimezone(zone).isoformat(),
                _csv_text(record.request_id),
                _csv_text(row.via),
                _csv_text(record.model_id),
                record.endpoint,
                record.status,
                record.error_code,
                *("" if count is None else count for count in tokens),
                money_str(record.amount),
                record.billing,
            )
        )


class ApplicationsView(ConsoleView):
    section = "applications"

    def get(self, request: HttpRequest) -> HttpResponse:
        applications = queries.authorized_applications_for_account(account=self.account)
        return self.render("console/applications.html", {"applications": applications})


class ApplicationRevokeView(ConsoleView):
    """Revoke every token an application (or, without an id, an operator) holds for the account."""

    section = "applications"

    def get(self, request: HttpRequest, application_id: int | None = None) -> HttpResponse:
        item = self._authorized(application_id)
        return self.render("console/application_revoke.html", {"item": item})

    def post(self, request: HttpRequest, application_id: int | None = None) -> HttpResponse:
        item = self._authorized(application_id)
        oauth_application_revoke_for_user(user_id=self.account.user_id, application_id=application_id)
        messages.success(request, f"{item.name} can no longer act for your account.")
        return redirect("console:applications")

    def _authorized(self, application_id: int | None) -> queries.AuthorizedApplication:
        item = queries.application_for_account(account=self.account, application_id=application_id)
        if item is None:
            raise Http404("No such authorized application.")
        return item


# --- The spend chart ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChartSegment:
    """One model's part of a day's bar (stacked from the baseline up, in the legend's order)."""

    y: float
    height: float
    colour: int  # the legend entry's index, mod CHART_COLOURS (CSS class seg-N)
    model: str
    label: str


@dataclass(frozen=True)
class ChartBar:
    x: float
    y: float
    width: float
    height: float
    day: Any
    label: str
    segments: tuple[ChartSegment, ...] = ()


@dataclass(frozen=True)
class LegendEntry:
    model: str
    colour: int
    total_label: str


@dataclass(frozen=True)
class SpendChart:
    width: int
    height: int
    baseline: float
    bars: list[ChartBar]
    peak_label: str
    total_label: str
    first_day: Any
    last_day: Any
    legend: tuple[LegendEntry, ...] = ()


CHART_WIDTH, CHART_HEIGHT, CHART_TOP, CHART_BOTTOM = 600, 160, 16, 20
CHART_COLOURS = 8
UNKNOWN_MODEL = "other charges"


def _segments(
    day: queries.SpendDayByModel | None, *, models: list[str], baseline: float, height: float
) -> tuple[ChartSegment, ...]:
    """A bar of `height` pixels cut into the day's models, in proportion to their amounts."""
    if day is None or not day.amount or not height:
        return ()
    segments, top = [], baseline
    for index, spend in enumerate(day.models):
        if not spend.amount:
            continue
        part = float(spend.amount / day.amount) * height
        top -= part
        segments.append(
            ChartSegment(
                y=round(top, 2),
                height=round(part, 2),
                colour=models.index(spend.model_id) % CHART_COLOURS if spend.model_id in models else index,
                model=spend.model_id or UNKNOWN_MODEL,
                label=money_display(spend.amount),
            )
        )
    return tuple(segments)


def spend_chart(
    days: list[queries.SpendDay],
    *,
    by_model: list[queries.SpendDayByModel] | None = None,
    models: list[str] | None = None,
) -> SpendChart:
    """Bar geometry for the server-rendered SVG (floats here are pixels, never money); with
    `by_model` each bar is stacked by model and the chart has a legend."""
    models = models or []
    split = {day.day: day for day in by_model or []}
    peak = max((day.amount for day in days), default=Decimal(0))
    slot = CHART_WIDTH / max(len(days), 1)
    baseline = CHART_HEIGHT - CHART_BOTTOM
    drawable = baseline - CHART_TOP
    bars = []
    for index, day in enumerate(days):
        height = float(day.amount / peak) * drawable if peak else 0.0
        if day.amount > 0:
            height = max(height, 1.5)  # a tiny charge stays visible
        bars.append(
            ChartBar(
                x=round(index * slot + slot * 0.15, 2),
                y=round(baseline - height, 2),
                width=round(slot * 0.7, 2),
                height=round(height, 2),
                day=day.day,
                label=money_display(day.amount),
                segments=_segments(split.get(day.day), models=models, baseline=baseline, height=height),
            )
        )
    total = sum((day.amount for day in days), start=Decimal(0))
    model_totals = {
        model: sum(
            (spend.amount for day in split.values() for spend in day.models if spend.model_id == model),
            start=Decimal(0),
        )
        for model in models
    }
    return SpendChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        baseline=baseline,
        bars=bars,
        peak_label=money_display(peak),
        total_label=money_display(total),
        first_day=days[0].day if days else None,
        last_day=days[-1].day if days else None,
        legend=tuple(
            LegendEntry(
                model=model or UNKNOWN_MODEL,
                colour=index % CHART_COLOURS,
                total_label=money_display(model_totals[model]),
            )
            for index, model in enumerate(models)
        ),
    )
