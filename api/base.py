"""The base of every /v1 DRF view: credential authentication, a credential required, the error shape."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from api.authentication import CredentialAuthentication
from core.errors import MISSING_API_KEY, AuthenticationFailed, MethodNotAllowed, Shape, UnsupportedContentType
from keys.credentials import Credential


class CredentialRequired(BasePermission):
    """Lets a request through only with a verified Credential; otherwise 401 `missing_api_key`.

    (Bad credentials never get here: CredentialAuthentication raises for them.)
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, Credential):
            return True
        raise AuthenticationFailed(
            "No API key was provided. Send it as 'Authorization: Bearer <API_KEY>'.", code=MISSING_API_KEY
        )


class GatewayAPIView(APIView):
    """Subclass for every /v1 endpoint. `self.credential` is the caller.

    `error_shape` picks the body shape of this view's errors ("compatible", "native", "google");
    None means by path (core.errors.shape_for_path). A view whose shape depends on the request
    overrides `get_error_shape()`.
    """

    authentication_classes: ClassVar[list[type]] = [CredentialAuthentication]
    permission_classes: ClassVar[list[type]] = [CredentialRequired]
    error_shape: ClassVar[Shape | None] = None
    # The media types a POST body may have (parameters such as charset aside), checked once the
    # credential is; empty: not checked here. `content_type_optional`: a body without a Content-Type
    # is read as the first.
    content_types: ClassVar[tuple[str, ...]] = ()
    content_type_optional: ClassVar[bool] = False

    @property
    def credential(self) -> Credential:
        return self.request.auth

    def get_error_shape(self) -> Shape | None:
        """The body shape of this request's errors (api.errors.drf_exception_handler asks)."""
        return self.error_shape

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().dispatch(request, *args, **kwargs)
        # DRF keeps the answer on the view (`self.response`), and the view, its request and the
        # request's parser context refer to each other: such a group is freed only by the cyclic
        # garbage collector, whose full passes are rare. With image bodies of megabytes in it, a
        # worker's memory grew by a body per call until the next pass (docs/benchmarks.md); let go
        # of it here and the body is freed once the server has sent it.
        self.response = None
        # The rest of the group: DRF's request names the view and itself in its parser context (read
        # only while the body is parsed, which is over). Emptied, the view, the request and what they
        # hold are freed by reference counting when the call ends; a stream's would otherwise outlive
        # its seconds in the collector's oldest generation until a full pass.
        parser_context = getattr(self.request, "parser_context", None)
        if parser_context is not None:
            parser_context.clear()
        return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # A wrong method is 405 whoever asks: answer it before looking at credentials.
        method = request.method.lower()
        if method not in self.http_method_names or not hasattr(self, method):
            raise MethodNotAllowed(
                f"Method {request.method} is not allowed on {request.path}.",
                headers={"Allow": ", ".join(self.allowed_methods)},
            )
        super().initial(request, *args, **kwargs)
        if method == "post" and self.content_types:
            self._content_type_check(request)

    def _content_type_check(self, request: Request) -> None:
        """415 `unsupported_content_type` in the view's shape for a body this endpoint does not read,
        after the credential (a caller without one gets 401 whatever it sent)."""
        accepted = self.content_types
        media_type = (request.META.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()
        if media_type in accepted or (not media_type and self.content_type_optional):
            return
        send = " or ".join(accepted)
        raise UnsupportedContentType(
            f'Content-Type "{media_type}" is not accepted here: send {send}.'
            if media_type
            else f"The request has no Content-Type: send {send}."
        )
