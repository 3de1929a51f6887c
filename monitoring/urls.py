from django.urls import path

from monitoring.views import MetricsView

urlpatterns = [path("metrics", MetricsView.as_view(), name="metrics")]
