"""GET of a hosted image by its signed link. No API key: the signature is the credential."""

from __future__ import annotations

from django.core.files.storage import default_storage
from django.http import FileResponse, HttpRequest, HttpResponse

from core.errors import ApiError, MethodNotAllowed, NotFound, error_response
from images.hosting import EXTENSIONS, hosted_image_resolve


def hosted_image_view(request: HttpRequest, token: str) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        response = error_response(
            MethodNotAllowed(f"Method {request.method} is not allowed here."), request=request
        )
        response["Allow"] = "GET, HEAD"
        return response
    try:
        resolved = hosted_image_resolve(token=token)
        handle = default_storage.open(resolved.image.storage_name, "rb")
    except ApiError as error:
        return error_response(error, request=request)
    except FileNotFoundError:
        return error_response(
            NotFound("This image is no longer stored.", code="image_not_found"), request=request
        )
    image = resolved.image
    response = FileResponse(
        handle, content_type=image.content_type, filename=f"image.{EXTENSIONS[image.content_type]}"
    )
    # The link is a bearer capability: private caches only, and never past the link's own expiry.
    response["Cache-Control"] = f"private, max-age={resolved.seconds_left}"
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Referrer-Policy"] = "no-referrer"
    return response
