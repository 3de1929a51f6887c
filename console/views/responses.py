"""The responses the gateway keeps for the account (the translated `/v1/responses` answers a later
call may continue: chat/response_store.py), and deleting one or all of them."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from chat.response_store import (
    kept_response_delete,
    kept_response_get,
    kept_responses_delete_all,
    kept_responses_recent,
)
from console.views.base import ConsoleView
from core.errors import NotFound

LISTED = 100


class StoredResponsesView(ConsoleView):
    section = "responses"

    def get(self, request: HttpRequest) -> HttpResponse:
        rows, total = kept_responses_recent(account_id=self.account.pk, limit=LISTED)
        return self.render(
            "console/responses.html",
            {"rows": rows, "total": total, "retention_days": settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS},
        )


class StoredResponseDeleteView(ConsoleView):
    """Delete one kept response (its items with it); another account's id is a 404."""

    section = "responses"

    def get(self, request: HttpRequest, response_id: str) -> HttpResponse:
        try:
            kept = kept_response_get(account_id=self.account.pk, response_id=response_id)
        except NotFound:
            raise Http404("No such stored response.") from None
        context = {"response_id": response_id, "model": kept.get("model"), "items": len(kept["output"])}
        return self.render("console/response_delete.html", context)

    def post(self, request: HttpRequest, response_id: str) -> HttpResponse:
        try:
            kept_response_delete(account_id=self.account.pk, response_id=response_id)
        except NotFound:
            raise Http404("No such stored response.") from None
        messages.success(request, f"Deleted the stored response {response_id}.")
        return redirect("console:responses")


class StoredResponsesDeleteAllView(ConsoleView):
    section = "responses"

    def get(self, request: HttpRequest) -> HttpResponse:
        return self.render("console/responses_delete_all.html", {})

    def post(self, request: HttpRequest) -> HttpResponse:
        deleted = kept_responses_delete_all(account_id=self.account.pk)
        messages.success(request, f"Deleted {deleted} stored response{'s' if deleted != 1 else ''}.")
        return redirect("console:responses")
