from django.urls import path

from images.views import ImageEditView, ImageGenerationView

urlpatterns = [
    path("images/generations", ImageGenerationView.as_view(), name="images-generations"),
    path("images/edits", ImageEditView.as_view(), name="images-edits"),
]
