from django.conf import settings
from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerView

# The admin's pages name this product, not Django.
admin.site.site_header = admin.site.site_title = "Image Gateway admin"
admin.site.index_title = "Operations"

urlpatterns = [
    # The billed calls first: Django tries the patterns in order, and every call resolves its path.
    path("v1/", include("chat.urls")),
    path("v1/", include("images.urls")),
    path("v1/", include("api.urls")),
    path("admin/", admin.site.urls),
    # Signed links to hosted images: outside /v1, no API key (images/hosting.py).
    path("files/", include("images.urls_files")),
    path("oauth/", include("console.oauth_urls")),
    # Prometheus metrics, behind GATEWAY_METRICS_TOKEN (monitoring/views.py).
    path("", include("monitoring.urls")),
    # Swagger UI over GET /v1/openapi.json, its scripts from drf-spectacular-sidecar's static files.
    path("docs/", SpectacularSwaggerView.as_view(url_name="v1-openapi"), name="api-docs"),
    # The web console (/console/), its sign-in pages (/accounts/) and / → console (docs/console.md).
    path("", include("console.urls")),
]

if settings.DEBUG:
    # `make run` serves the admin's CSS from gunicorn; production puts collectstatic behind the proxy.
    urlpatterns += staticfiles_urlpatterns()
