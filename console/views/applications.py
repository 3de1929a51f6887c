"""The authorized OAuth applications of the account, and revoking what one (or an operator) holds."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from console import queries
from console.views.base import ConsoleView
from keys.services import oauth_application_revoke_for_user


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
