"""The OAuth 2 authorization server (mounted under `oauth/`): authorize (consent), token, revoke.
Anonymous users are sent to the console's sign-in page (LOGIN_URL) and come back to the consent step.

Only django-oauth-toolkit's protocol endpoints are exposed; applications are registered by staff in
the admin, so DOT's self-service application pages are not mounted.
"""

from django.urls import include, path
from oauth2_provider import views as oauth_views

oauth2_provider_patterns = [
    path("authorize/", oauth_views.AuthorizationView.as_view(), name="authorize"),
    path("token/", oauth_views.TokenView.as_view(), name="token"),
    path("revoke_token/", oauth_views.RevokeTokenView.as_view(), name="revoke-token"),
]

urlpatterns = [
    path("", include((oauth2_provider_patterns, "oauth2_provider"))),
]
