"""GET /healthz and GET /readyz: for load balancers and orchestrators, outside /v1, no credential.

Answered by a middleware placed first, before any other: a probe is not an API call (no usage
record, no authentication, no session or CSRF machinery), and it is answered whatever its Host
header says. Load balancers and Kubernetes probe a node by its address (`Host: 10.0.3.7:8000`),
which ALLOWED_HOSTS rightly does not list; the check Django makes there would answer them 400.
The checks are core/health.py's.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from core.health import readiness_checks


def healthz() -> JsonResponse:
    """Liveness: the process answers. Touches no database, cache or upstream, so a database outage
    never gets healthy processes restarted."""
    return JsonResponse({"status": "ok"})


def readyz() -> JsonResponse:
    """Readiness: 200 when every check passed, else 503; the body lists each check and its result
    and names the failed ones."""
    results = readiness_checks()
    ready = all(passed for passed, _ in results.values())
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": {name: {"ok": passed, "detail": detail} for name, (passed, detail) in results.items()},
        "failed": [name for name, (passed, _) in results.items() if not passed],
    }
    return JsonResponse(body, status=200 if ready else 503)


PROBES: dict[str, Callable[[], JsonResponse]] = {"/healthz": healthz, "/readyz": readyz}


class HealthProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        probe = PROBES.get(request.path_info)
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = JsonResponse({"status": "method_not_allowed"}, status=405)
            response["Allow"] = "GET, HEAD"
            return response
        response = probe()
        response["Cache-Control"] = "no-store"
        return response
