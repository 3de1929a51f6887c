"""The project's URLs plus views that raise a domain error named in the path, inside a usage scope
(which records the call's outcome): one in the compatible family's paths, one under /v1/messages
(native shape), and a plain Django view that leaves the error to ApiErrorMiddleware."""

from django.http import HttpRequest
from django.urls import path
from rest_framework.request import Request

from api.base import GatewayAPIView
from api.usage import usage_scope
from gateway_project.urls import urlpatterns as project_urlpatterns
from tests.api.domain_errors import domain_error_make


class RaiseView(GatewayAPIView):
    def post(self, request: Request, name: str):
        with usage_scope(request_id=request.request_id, endpoint="test.domain", credential=self.credential):
            raise domain_error_make(
                name, retry_after=request.data.get("retry_after"), final=request.data.get("final") is True
            )


def plain_raise(request: HttpRequest, name: str):
    raise domain_error_make(name, retry_after=None)


urlpatterns = [
    *project_urlpatterns,
    path("v1/test/domain/<str:name>", RaiseView.as_view()),
    path("v1/messages/test/domain/<str:name>", RaiseView.as_view()),
    path("v1/test/plain-domain/<str:name>", plain_raise),
]
