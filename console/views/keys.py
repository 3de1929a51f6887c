"""The API keys page: the account's keys with their limits and budget spend, a new key (its secret
shown once, its limits set with it), changing a key's limits, and revoking one."""

from __future__ import annotations

import json
import time
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts.models import Account
from api.answers import StoredResponse
from api.idempotency import idempotent_answer
from billing.errors import IdempotencyKeyInUse
from console import queries
from console.forms import ApiKeyCreateForm, ApiKeyLimitsEditForm
from console.views.base import ConsoleView
from keys.errors import KeyLimitsInvalid
from keys.models import ApiKey
from keys.services import ApiKeyGroupNotAllowed, api_key_create, api_key_limits_set, api_key_revoke

NEW_KEY_SESSION = "console.new_key"
# The key form's token as an idempotency key of the account, apart from any key an API client chooses;
# one fingerprint for every POST of a form, so a token creates one key whatever the values sent.
KEY_FORM_KEY_PREFIX = "console-key-form:"
KEY_FORM_FINGERPRINT = "console-key-form"
# The secret waits in the (server-side) session for the redirected GET only; one left behind (the
# redirect never followed) is not shown after this long.
NEW_KEY_SHOWN_FOR_SECONDS = 300


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
                limits=form.limits(),
            )
            created.update(api_key=api_key, secret=secret)
            # What the token's record keeps: the key's id, never its secret.
            body = json.dumps({"api_key": api_key.pk}).encode()
            return StoredResponse(status=201, body=body, content_type="application/json")

        token = form.cleaned_data["form_token"]
        try:
            # The form's token is single-use: of several POSTs of one form (a double click, back and
            # send, two at once), the one that inserts the token's row creates the key.
            idempotent_answer(
                account=self.account,
                key=f"{KEY_FORM_KEY_PREFIX}{token}" if token else None,
                fingerprint=KEY_FORM_FINGERPRINT,
                produce=produce,
            )
        except ApiKeyGroupNotAllowed:
            # The form offers allowed groups only; an operator took this one away since.
            form.add_error("group", "Your account may no longer use this group.")
            return self._page(form=form, status=400)
        except KeyLimitsInvalid as refused:  # the form checked them: only a race with a change of models
            form.add_error(refused.param if refused.param in form.fields else None, refused.message)
            return self._page(form=form, status=400)
        except IdempotencyKeyInUse:
            pass
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
        context = {
            "form": form,
            "keys": keys,
            "key_rows": queries.key_rows(api_keys=keys),
            "group_models": queries.key_group_models(
                groups=queries.key_groups_for_account(account=self.account)
            ),
            **extra,
        }
        return self.render("console/keys.html", context, status=status)


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


class ApiKeyLimitsView(ConsoleView):
    """A key's own limits: shown with its spend in the current budget window, and changed."""

    section = "keys"

    def get(self, request: HttpRequest, api_key_id: int) -> HttpResponse:
        api_key = _account_key(self.account, api_key_id)
        return self._page(api_key=api_key, form=ApiKeyLimitsEditForm(api_key=api_key))

    def post(self, request: HttpRequest, api_key_id: int) -> HttpResponse:
        api_key = _account_key(self.account, api_key_id)
        if api_key.status == "revoked":
            return self._page(api_key=api_key, form=None, status=409)
        form = ApiKeyLimitsEditForm(request.POST, api_key=api_key)
        if not form.is_valid():
            return self._page(api_key=api_key, form=form, status=400)
        try:
            changed = api_key_limits_set(api_key=api_key, limits=form.limits())
        except KeyLimitsInvalid as refused:  # the form checked them: never in practice
            form.add_error(refused.param if refused.param in form.fields else None, refused.message)
            return self._page(api_key=api_key, form=form, status=400)
        if changed:
            messages.success(
                request, f"The limits of the key {api_key} were saved; they apply from its next call."
            )
        else:
            messages.info(request, f"The limits of the key {api_key} were already these.")
        return redirect("console:keys")

    def _page(self, *, api_key: ApiKey, form: ApiKeyLimitsEditForm | None, status: int = 200) -> HttpResponse:
        context = {
            "api_key": api_key,
            "form": form if api_key.status != "revoked" else None,
            "row": queries.key_rows(api_keys=[api_key])[0],
            "group_models": queries.key_group_models(groups=[api_key.group]),
        }
        return self.render("console/key_limits.html", context, status=status)


def _account_key(account: Account, api_key_id: int) -> ApiKey:
    """The account's key with this id; 404 for another account's key, exactly as for a missing one."""
    api_key = queries.api_key_for_account(account=account, api_key_id=api_key_id)
    if api_key is None:
        raise Http404("No such key.")
    return api_key


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

    def _api_key(self, api_key_id: int) -> ApiKey:
        return _account_key(self.account, api_key_id)
