"""Shedding new calls at once when the worker process cannot keep up.

A call that arrives while the process is seconds behind (core/overload.py) would wait those seconds
before anything of it runs, and its caller would see nothing meanwhile. With GATEWAY_SHED_LAG_SECONDS
set, such a call is answered 503 `overloaded` with Retry-After at once instead: before authentication
and before anything is reserved, so it is never billed, and counted (`gateway_calls_shed`). Behind
deploy/nginx.conf it is then tried on another node. Only new `/v1` POST calls are shed: the calls and
streams in flight go on, and reads (`GET /v1/models`, `/v1/me`), the probes, the console and the
admin are always served.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

from core.errors import Overloaded, error_response
from core.metrics import call_shed
from core.overload import worker_lag

API_PREFIX = "/v1/"


class OverloadSheddingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.limit: float = settings.GATEWAY_SHED_LAG_SECONDS

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if self.limit and request.method == "POST" and request.path.startswith(API_PREFIX):
            lag = worker_lag()
            if lag > self.limit:
                call_shed()
                error = Overloaded(
                    "The gateway is overloaded and did not start this call; nothing was charged. "
                    "Retry it shortly."
                )
                return error_response(error, request=request)
        return self.get_response(request)
