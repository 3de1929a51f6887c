"""Signed links to hosted images, included under /files/ (outside /v1: no API key is needed)."""

from django.urls import path

from images.views_files import hosted_image_view

app_name = "images_files"

urlpatterns = [
    path("images/<str:token>", hosted_image_view, name="hosted-image"),
]
