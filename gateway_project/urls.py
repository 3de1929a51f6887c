from django.conf import settings
from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]

if settings.DEBUG:
    # `make run` serves the admin's CSS from gunicorn; production puts collectstatic behind the proxy.
    urlpatterns += staticfiles_urlpatterns()
