from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request

from api.base import GatewayAPIView
from images.pipeline import image_call_handle


class ImageGenerationView(GatewayAPIView):
    """POST /v1/images/generations (JSON)."""

    parser_classes = [JSONParser]

    def post(self, request: Request):
        return image_call_handle(request=request, operation="generate")


class ImageEditView(GatewayAPIView):
    """POST /v1/images/edits (multipart/form-data)."""

    parser_classes = [MultiPartParser, FormParser]

    def post(self, request: Request):
        return image_call_handle(request=request, operation="edit")
