"""The /v1 endpoints of the keys app (mounted under `v1/`)."""

from django.urls import path

from api.openapi import OpenApiSchemaView
from api.views import MeView, ModelDetailView, ModelListView

urlpatterns = [
    path("models", ModelListView.as_view(), name="v1-models"),
    # Any id GET /v1/models lists: `<group_id>:<model>`, dots, even a slash.
    path("models/<path:model_id>", ModelDetailView.as_view(), name="v1-model"),
    path("me", MeView.as_view(), name="v1-me"),
    # The OpenAPI 3 document of /v1, needing no credential (api/openapi.py); its page is /docs/.
    path("openapi.json", OpenApiSchemaView.as_view(), name="v1-openapi"),
]
