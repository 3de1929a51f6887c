"""The /v1 endpoints of the keys app (mounted under `v1/`)."""

from django.urls import path

from api.admin import (
    AdminAccountCreateView,
    AdminAccountKeysView,
    AdminAlertSettingsView,
    AdminKeyRevokeView,
    AdminKeyView,
    AdminTopUpView,
    AdminUsageView,
)
from api.openapi import OpenApiSchemaView
from api.views import MeView, ModelDetailView, ModelListView

urlpatterns = [
    path("models", ModelListView.as_view(), name="v1-models"),
    # Any id GET /v1/models lists: `<group_id>:<model>`, dots, even a slash.
    path("models/<path:model_id>", ModelDetailView.as_view(), name="v1-model"),
    path("me", MeView.as_view(), name="v1-me"),
    # The provisioning API for staff automation (api/admin.py).
    path("admin/accounts", AdminAccountCreateView.as_view(), name="v1-admin-accounts"),
    path(
        "admin/accounts/<int:account_id>/keys", AdminAccountKeysView.as_view(), name="v1-admin-account-keys"
    ),
    path("admin/accounts/<int:account_id>/topups", AdminTopUpView.as_view(), name="v1-admin-account-topups"),
    path("admin/accounts/<int:account_id>/usage", AdminUsageView.as_view(), name="v1-admin-account-usage"),
    path(
        "admin/accounts/<int:account_id>/alerts",
        AdminAlertSettingsView.as_view(),
        name="v1-admin-account-alerts",
    ),
    path("admin/keys/<int:key_id>", AdminKeyView.as_view(), name="v1-admin-key"),
    path("admin/keys/<int:key_id>/revoke", AdminKeyRevokeView.as_view(), name="v1-admin-key-revoke"),
    # The OpenAPI 3 document of /v1, needing no credential (api/openapi.py); its page is /docs/.
    path("openapi.json", OpenApiSchemaView.as_view(), name="v1-openapi"),
]
