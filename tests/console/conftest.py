"""Fixtures for the web console: signed-in clients, keys, a model alice may not use, and a real
headless chromium (Debian's, at /usr/bin/chromium) driven by Playwright against the live server."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connections

from keys.services import api_key_create
from tests.console.browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS


@pytest.fixture(autouse=True)
def _fresh_sign_in_counters():
    """Failed sign-ins are counted in the cache for GATEWAY_SIGNIN_WINDOW_SECONDS; with Redis the
    counters would outlive a test run, and a few runs would lock the fixtures' users out."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _media_root(settings, tmp_path):
    """The playground's images are hosted (stored under MEDIA_ROOT): in the test's own directory."""
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice.user)
    return client


@pytest.fixture
def bob_client(client, bob):
    client.force_login(bob.user)
    return client


@pytest.fixture
def alice_key(alice, alpha_group):
    api_key, secret = api_key_create(account=alice, group=alpha_group, label="alice laptop")
    return api_key, secret


@pytest.fixture
def bob_key(bob, alpha_group):
    api_key, secret = api_key_create(account=bob, group=alpha_group, label="bob server")
    return api_key, secret


@pytest.fixture
def browser_contexts(monkeypatch):
    """Fresh chromium contexts for a test: `browser_contexts(**options)` opens one (Playwright's
    `new_context` options; 1280 x 900 with scripts on unless told otherwise). Playwright's sync API
    runs an event loop in this thread, and Django refuses ORM calls from a thread with a running loop
    unless told it is safe: the test's own database reads happen between browser steps, never
    concurrently with them."""
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        opened = []

        def open_context(**options):
            context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **options})
            context.set_default_timeout(30_000)
            opened.append(context)
            return context

        try:
            yield open_context
        finally:
            for context in opened:
                context.close()
            browser.close()
            # The test's own queries ran while Playwright's loop was running, on a connection of
            # their own context: close it here, or it outlives the test and blocks dropping the
            # test database at the end of the run.
            connections.close_all()


@pytest.fixture
def browser_context(browser_contexts):
    """A fresh chromium context at desktop width, scripts on."""
    return browser_contexts()


@pytest.fixture
def page(browser_context):
    return browser_context.new_page()
