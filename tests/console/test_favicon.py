"""`/favicon.ico`: served by the gateway (static files are not, in production), to anyone, cacheable."""

from __future__ import annotations

import io

import pytest
from PIL import Image

pytestmark = pytest.mark.django_db


def test_the_favicon_is_an_icon_served_without_signing_in(client, settings):
    settings.DEBUG = False

    response = client.get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert "max-age=604800" in response["Cache-Control"] and "public" in response["Cache-Control"]
    icon = Image.open(io.BytesIO(response.content))
    assert icon.format == "ICO"
    assert {(16, 16), (32, 32)} <= set(icon.info["sizes"])


def test_every_console_page_names_it(alice_client):
    for path in ("/console/", "/accounts/login/"):
        html = alice_client.get(path, follow=True).content.decode()
        assert '<link rel="icon" href="/favicon.ico">' in html
