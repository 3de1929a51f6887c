"""The text endpoints (mounted under `v1/`)."""

from django.urls import path

from chat.views import ChatCompletionsView, CountTokensView, KeptResponseView, MessagesView, ResponsesView

urlpatterns = [
    path("chat/completions", ChatCompletionsView.as_view(), name="v1-chat-completions"),
    path("responses", ResponsesView.as_view(), name="v1-responses"),
    path("responses/<str:response_id>", KeptResponseView.as_view(), name="v1-response"),
    path("messages", MessagesView.as_view(), name="v1-messages"),
    path("messages/count_tokens", CountTokensView.as_view(), name="v1-messages-count-tokens"),
]
