"""The web console (`/console/`, namespace "console"), its sign-in pages (`/accounts/`), `/` → console
and `/favicon.ico`."""

from django.urls import include, path
from django.views.generic import RedirectView

from console.views import (
    alerts,
    applications,
    auth,
    favicon,
    keys,
    overview,
    playground_chat,
    playground_images,
    responses,
    usage,
)

console_patterns = [
    path("", overview.OverviewView.as_view(), name="overview"),
    path("keys/", keys.ApiKeysView.as_view(), name="keys"),
    path("keys/<int:api_key_id>/limits/", keys.ApiKeyLimitsView.as_view(), name="key-limits"),
    path("keys/<int:api_key_id>/revoke/", keys.ApiKeyRevokeView.as_view(), name="key-revoke"),
    path("playground/", playground_images.PlaygroundView.as_view(), name="playground"),
    path("usage/", usage.UsageView.as_view(), name="usage"),
    path("alerts/", alerts.AlertsView.as_view(), name="alerts"),
    path(
        "playground/result/<str:request_id>/",
        playground_images.PlaygroundResultView.as_view(),
        name="playground-result",
    ),
    path("playground/chat/", playground_chat.ChatPlaygroundView.as_view(), name="chat"),
    path("playground/chat/stream/", playground_chat.ChatPlaygroundStreamView.as_view(), name="chat-stream"),
    path(
        "playground/chat/result/<str:request_id>/",
        playground_chat.ChatPlaygroundResultView.as_view(),
        name="chat-result",
    ),
    path(
        "playground/chat/usage/<str:request_id>/",
        playground_chat.ChatPlaygroundUsageView.as_view(),
        name="chat-usage",
    ),
    path("applications/", applications.ApplicationsView.as_view(), name="applications"),
    path(
        "applications/<int:application_id>/revoke/",
        applications.ApplicationRevokeView.as_view(),
        name="application-revoke",
    ),
    path(
        "applications/operator/revoke/",
        applications.ApplicationRevokeView.as_view(),
        name="operator-tokens-revoke",
    ),
    path("responses/", responses.StoredResponsesView.as_view(), name="responses"),
    path("responses/delete/", responses.StoredResponsesDeleteAllView.as_view(), name="responses-delete-all"),
    path(
        "responses/<str:response_id>/delete/",
        responses.StoredResponseDeleteView.as_view(),
        name="response-delete",
    ),
]

auth_patterns = [
    path("login/", auth.ConsoleLoginView.as_view(), name="login"),
    path("logout/", auth.ConsoleLogoutView.as_view(), name="logout"),
    path("password-reset/", auth.PasswordResetView.as_view(), name="password_reset"),
    path("password-reset/sent/", auth.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path(
        "reset/<uidb64>/<token>/",
        auth.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path("reset/done/", auth.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
]

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:overview"), name="home"),
    path("favicon.ico", favicon.favicon, name="favicon"),
    path("console/", include((console_patterns, "console"))),
    path("accounts/", include(auth_patterns)),
]
