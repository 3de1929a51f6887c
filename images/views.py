from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request

from api.base import GatewayAPIView
from api.parsers import GatewayJSONParser
from images.pipeline import image_call_handle
from images.schema import edit_schema, generation_schema


class ImageGenerationView(GatewayAPIView):
    """POST /v1/images/generations (JSON)."""

    parser_classes = [GatewayJSONParser]
    content_types = ("application/json",)

    @generation_schema
    def post(self, request: Request):
        return image_call_handle(request=request, operation="generate")


class ImageEditView(GatewayAPIView):
    """POST /v1/images/edits (multipart/form-data)."""

    parser_classes = [MultiPartParser, FormParser]
    content_types = ("multipart/form-data", "application/x-www-form-urlencoded")

    @edit_schema
    def post(self, request: Request):
        return image_call_handle(request=request, operation="edit")
