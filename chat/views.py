"""The text endpoints: POST /v1/chat/completions, /v1/responses (OpenAI style, compatible error
shape), /v1/messages and /v1/messages/count_tokens (Anthropic style, native error shape); GET and
DELETE /v1/responses/{id} for the responses the gateway kept."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework.request import Request
from rest_framework.response import Response

from api.base import GatewayAPIView
from chat.families import CHAT, COUNT_TOKENS, MESSAGES_FAMILY, RESPONSES_FAMILY, Family
from chat.pipeline import text_call_handle
from chat.response_store import kept_response_delete, kept_response_get
from chat.schema import (
    chat_completions_schema,
    count_tokens_schema,
    kept_response_schema,
    messages_schema,
    responses_schema,
)
from keys.group_access import models_invoke_check


class TextView(GatewayAPIView):
    """The body is read raw by the pipeline (chat/validation.py), not by DRF's parsers: JSON only,
    with or without a charset parameter, and a body without a Content-Type (some clients send none)."""

    family: ClassVar[Family]
    parser_classes: ClassVar[list[type]] = []
    content_types = ("application/json",)
    content_type_optional = True

    def post(self, request: Request):
        return text_call_handle(request=request, family=self.family)


@chat_completions_schema
class ChatCompletionsView(TextView):
    family = CHAT
    error_shape = "compatible"


@responses_schema
class ResponsesView(TextView):
    family = RESPONSES_FAMILY
    error_shape = "compatible"


@messages_schema
class MessagesView(TextView):
    family = MESSAGES_FAMILY
    error_shape = "native"


@count_tokens_schema
class CountTokensView(TextView):
    family = COUNT_TOKENS
    error_shape = "native"


@kept_response_schema
class KeptResponseView(GatewayAPIView):
    """A response the gateway kept of a translated model (chat/response_store.py), for a credential of
    its account that may call models."""

    error_shape = "compatible"

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        models_invoke_check(credential=self.credential)

    def get(self, request: Request, response_id: str) -> Response:
        return Response(kept_response_get(account_id=self.credential.account.pk, response_id=response_id))

    def delete(self, request: Request, response_id: str) -> Response:
        kept_response_delete(account_id=self.credential.account.pk, response_id=response_id)
        return Response({"id": response_id, "object": "response.deleted", "deleted": True})
