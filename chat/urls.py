"""The text endpoints (mounted under `v1/`)."""

from django.urls import path

from chat.views import ChatCompletionsView, CountTokensView, MessagesView, ResponsesView

urlpatterns = [
    path("chat/completions", ChatCompletionsView.as_view(), name="v1-chat-completions"),
    path("responses", ResponsesView.as_view(), name="v1-responses"),
    path("messages", MessagesView.as_view(), name="v1-messages"),
    path("messages/count_tokens", CountTokensView.as_view(), name="v1-messages-count-tokens"),
]
