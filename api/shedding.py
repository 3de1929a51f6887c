"""Shedding new calls at once when the worker process cannot keep up.

A call that arrives while the process is seconds behind (core/overload.py: late with what is due, or
slow to start the calls that came before) would wait those seconds before its upstream request goes,
and its caller would see nothing meanwhile. With GATEWAY_SHED_LAG_SECONDS set, such a call is
answered 503 `overloaded` with Retry-After at once instead: before authentication
and before anything is reserved, so it is never billed, and counted (`gateway_calls_shed`). The answer
names nginx's `@shed` location in `X-Accel-Redirect`: behind deploy/nginx.conf the call is sent on to
a node that has not shed it, and the header never reaches the client (nginx hides X-Accel-*
headers); a client calling a node directly gets the 503 and may ignore the header. Only new `/v1`
POST calls are shed: the calls and streams in flight go on, and reads (`GET /v1/models`, `/v1/me`),
the probes, the console and the admin are served as usual.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

from core.errors import Overloaded, error_response
from core.metrics import call_shed
from core.overload import call_arrived, call_ended, start_delay, worker_lag

API_PREFIX = "/v1/"
# deploy/nginx.conf's named location that sends a shed call on to another node.
SHED_REDIRECT = "@shed"


class OverloadSheddingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.limit: float = settings.GATEWAY_SHED_LAG_SECONDS

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not self.limit:
            return self.get_response(request)
        call = request.method == "POST" and request.path.startswith(API_PREFIX)
        if call and max(worker_lag(), start_delay()) > self.limit:
            call_shed()
            error = Overloaded(
                "The gateway is overloaded and did not start this call; nothing was charged. "
                "Retry it shortly."
            )
            response = error_response(error, request=request)
            response["X-Accel-Redirect"] = SHED_REDIRECT
            return response
        call_arrived(counted=call)
        try:
            return self.get_response(request)
        finally:
            call_ended()
