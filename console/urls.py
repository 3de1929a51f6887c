"""The web console (`/console/`, namespace "console"), its sign-in pages (`/accounts/`), `/` → console
and `/favicon.ico`."""

from django.urls import include, path
from django.views.generic import RedirectView

from console import views

console_patterns = [
    path("", views.OverviewView.as_view(), name="overview"),
    path("keys/", views.ApiKeysView.as_view(), name="keys"),
    path("keys/<int:api_key_id>/revoke/", views.ApiKeyRevokeView.as_view(), name="key-revoke"),
    path("playground/", views.PlaygroundView.as_view(), name="playground"),
    path("usage/", views.UsageView.as_view(), name="usage"),
    path(
        "playground/result/<str:request_id>/",
        views.PlaygroundResultView.as_view(),
        name="playground-result",
    ),
    path("playground/chat/", views.ChatPlaygroundView.as_view(), name="chat"),
    path("playground/chat/stream/", views.ChatPlaygroundStreamView.as_view(), name="chat-stream"),
    path(
        "playground/chat/result/<str:request_id>/",
        views.ChatPlaygroundResultView.as_view(),
        name="chat-result",
    ),
    path(
        "playground/chat/usage/<str:request_id>/",
        views.ChatPlaygroundUsageView.as_view(),
        name="chat-usage",
    ),
    path("applications/", views.ApplicationsView.as_view(), name="applications"),
    path(
        "applications/<int:application_id>/revoke/",
        views.ApplicationRevokeView.as_view(),
        name="application-revoke",
    ),
    path(
        "applications/operator/revoke/",
        views.ApplicationRevokeView.as_view(),
        name="operator-tokens-revoke",
    ),
]

auth_patterns = [
    path("login/", views.ConsoleLoginView.as_view(), name="login"),
    path("logout/", views.ConsoleLogoutView.as_view(), name="logout"),
    path("password-reset/", views.PasswordResetView.as_view(), name="password_reset"),
    path("password-reset/sent/", views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path(
        "reset/<uidb64>/<token>/",
        views.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path("reset/done/", views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
]

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:overview"), name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("console/", include((console_patterns, "console"))),
    path("accounts/", include(auth_patterns)),
]
