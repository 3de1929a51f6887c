"""The /v1 endpoints of the keys app (mounted under `v1/`)."""

from django.urls import path

from api.views import MeView, ModelListView

urlpatterns = [
    path("models", ModelListView.as_view(), name="v1-models"),
    path("me", MeView.as_view(), name="v1-me"),
]
