"""`/favicon.ico`, served by the gateway itself from the console's static files."""

from __future__ import annotations

import functools
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import cache_control

FAVICON = "console/favicon.ico"
FAVICON_MAX_AGE = 7 * 24 * 3600


@functools.cache
def _favicon_bytes() -> bytes:
    path = finders.find(FAVICON)
    if path is None:
        raise ImproperlyConfigured(f"the static file {FAVICON} is missing")
    return Path(path).read_bytes()


@cache_control(public=True, max_age=FAVICON_MAX_AGE)
def favicon(request: HttpRequest) -> HttpResponse:
    """`/favicon.ico`, which browsers ask for on every site whatever the page says: served from the
    console's static files by the gateway itself, as the static files are not served in production."""
    return HttpResponse(_favicon_bytes(), content_type="image/x-icon")
