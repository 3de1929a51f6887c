"""The project's URLs plus a few /v1 views that fail in each way the error model must handle."""

from django.http import HttpResponseServerError
from django.urls import path
from rest_framework.response import Response

from api.base import GatewayAPIView
from core.errors import ApiError, RateLimited
from gateway_project.urls import urlpatterns as project_urlpatterns


class EchoView(GatewayAPIView):
    def post(self, request):
        return Response({"received": request.data})


class CrashView(GatewayAPIView):
    def get(self, request):
        raise RuntimeError("boom: secret internals")


class SlowDownView(GatewayAPIView):
    def get(self, request):
        raise RateLimited("Too many requests.", retry_after=2.2)


class OverloadedView(GatewayAPIView):
    def get(self, request):
        raise ApiError("The upstream is overloaded.", status=503, type="upstream_error", code="overloaded")


class NativeShapeView(GatewayAPIView):
    error_shape = "native"

    def get(self, request):
        raise ApiError("Balance too low.", status=402, type="billing_error", code="INSUFFICIENT_BALANCE")


class GoogleShapeView(GatewayAPIView):
    error_shape = "google"

    def get(self, request):
        raise ApiError("Not allowed.", status=403, type="permission_error", code="model_not_allowed")


def plain_django_crash(request):
    raise RuntimeError("boom in a plain Django view")


def plain_django_html_500(request):
    return HttpResponseServerError("<html><body><h1>Server Error</h1></body></html>")


urlpatterns = [
    *project_urlpatterns,
    path("v1/test/echo", EchoView.as_view()),
    path("v1/test/crash", CrashView.as_view()),
    path("v1/test/slow-down", SlowDownView.as_view()),
    path("v1/test/overloaded", OverloadedView.as_view()),
    path("v1/test/native", NativeShapeView.as_view()),
    path("v1/test/google", GoogleShapeView.as_view()),
    path("v1/test/plain-crash", plain_django_crash),
    path("v1/test/plain-html-500", plain_django_html_500),
]
