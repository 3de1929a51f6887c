"""Django's request signals in tests: code run as a request's is, without losing the test's
transaction (Django closes stale database connections on both signals; its test client disconnects
that for the request, and so do these)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.signals import request_finished, request_started
from django.db import close_old_connections


@contextmanager
def database_connection_kept() -> Iterator[None]:
    """Within the block, a request's start and end leave the test's database connection open."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@contextmanager
def serving_a_request() -> Iterator[None]:
    """The block runs as a request's code: `request_started` before it, `request_finished` after."""
    with database_connection_kept():
        request_started.send(sender=None)
        try:
            yield
        finally:
            request_finished.send(sender=None)
