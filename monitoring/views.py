"""GET /metrics: the Prometheus text format (README, "Metrics").

Protected by GATEWAY_METRICS_TOKEN (`Authorization: Bearer <token>`, else 401); with no token set it
answers 404 unless GATEWAY_METRICS_PUBLIC=1 (for a scrape address that only the monitoring can
reach). It is not an API call: no key, no usage record, no limits.
"""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.http import HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from rest_framework.request import Request
from rest_framework.views import APIView

from core.errors import AuthenticationFailed, NotFound
from monitoring.collectors import CircuitCollector, HoldsCollector, ProcessRegistryCollector


def metrics_access_check(*, authorization: str) -> None:
    """Raise unless this request may read the metrics."""
    token = settings.GATEWAY_METRICS_TOKEN
    if not token:
        if settings.GATEWAY_METRICS_PUBLIC:
            return
        raise NotFound("Not found.")
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise AuthenticationFailed(
            "The metrics need 'Authorization: Bearer <GATEWAY_METRICS_TOKEN>'.", code="invalid_metrics_token"
        )


def metrics_registry() -> CollectorRegistry:
    """A registry for one scrape: every worker's files (gunicorn sets PROMETHEUS_MULTIPROC_DIR) or this
    process's own metrics, then what is read at scrape time."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(ProcessRegistryCollector())
    registry.register(HoldsCollector())
    registry.register(CircuitCollector())
    return registry


class MetricsView(APIView):
    authentication_classes = ()
    permission_classes = ()

    def get(self, request: Request) -> HttpResponse:
        metrics_access_check(authorization=request.META.get("HTTP_AUTHORIZATION", ""))
        return HttpResponse(generate_latest(metrics_registry()), content_type=CONTENT_TYPE_LATEST)
