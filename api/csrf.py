"""CSRF_FAILURE_VIEW: JSON under /v1 and /files, Django's own page everywhere else."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.csrf import csrf_failure as django_csrf_failure

from api.middleware import is_json_path
from core.errors import PermissionDenied, error_response


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """/v1 and /files skip the CSRF middleware (api.middleware._BrowserOnly), so this answers them
    only if that ever changes; their answer must still be JSON."""
    if is_json_path(request):
        return error_response(
            PermissionDenied(f"CSRF verification failed: {reason}", code="csrf_failed"), request=request
        )
    return django_csrf_failure(request, reason=reason)
