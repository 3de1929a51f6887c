from typing import Any

from django.contrib import admin
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from core.admin_confirm import admin_action_confirmed
from upstreams.circuit import STATS_WINDOW_MINUTES, circuit_reset, circuit_state
from upstreams.models import Upstream


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin[Upstream]):
    list_display = (
        "name",
        "kind",
        "base_url",
        "api_key_env",
        "priority",
        "weight",
        "timeout_seconds",
        "enabled",
        "circuit",
        "recent_errors",
    )
    list_filter = ("kind", "enabled")
    search_fields = ("name", "base_url")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    readonly_fields = ("circuit", "recent_errors")
    actions = ("close_circuits",)

    @admin.display(description="Circuit")
    def circuit(self, obj: Upstream) -> str:
        state = circuit_state(upstream_id=obj.pk)
        if state.state == "closed":
            return f"closed ({state.consecutive_failures} consecutive failures)"
        return state.state

    @admin.display(description=f"Errors, last {STATS_WINDOW_MINUTES} min")
    def recent_errors(self, obj: Upstream) -> str:
        state = circuit_state(upstream_id=obj.pk)
        if state.recent_error_rate is None:
            return "no calls"
        return f"{state.recent_errors}/{state.recent_calls} ({state.recent_error_rate:.0%})"

    @admin.action(description="Close the circuit of selected upstreams…")
    def close_circuits(self, request: HttpRequest, queryset: QuerySet[Upstream]) -> TemplateResponse | None:
        def close(upstreams: list[Any]) -> str:
            for upstream in upstreams:
                circuit_reset(upstream_id=upstream.pk)
            return f"Closed the circuit of {len(upstreams)} upstream(s)."

        return admin_action_confirmed(
            model_admin=self,
            request=request,
            queryset=queryset,
            action="close_circuits",
            title="Close circuits",
            consequence="Calls go to these upstreams again at once, even if they are still failing.",
            perform=lambda upstreams: close(list(upstreams)),
        )
