"""A confirmation page for bulk admin actions: the first POST shows what will happen to which rows;
only the confirming POST runs the action."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse


def admin_action_confirmed(
    *,
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    action: str,
    title: str,
    consequence: str,
    perform: Callable[[QuerySet[Any]], str],
) -> TemplateResponse | None:
    """Run `perform(queryset)` once the staff user confirmed; until then answer the confirmation page.
    `perform` returns the message shown after it ran."""
    if request.POST.get("confirmed") == "yes":
        model_admin.message_user(request, perform(queryset), messages.SUCCESS)
        return None
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "consequence": consequence,
        "objects": list(queryset[:200]),
        "count": queryset.count(),
        "action": action,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "selected": [str(pk) for pk in queryset.values_list("pk", flat=True)],
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "admin/confirm_action.html", context)
