"""The push watch of the configuration caches: one Redis connection per process on which Redis reports,
the moment it happens, every change of the configuration generation's key and of other watched keys.

`GenerationWatch` keeps the generation this process last read for as long as Redis has said nothing
about it (core/config_cache.py asks it before reading Redis); `key_changes_watch` has changes of other
keys of the cache reported on the same connection (the circuit breaker's). A forked process makes its
own connection; a change of CACHES or REDIS_URL (tests) closes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.core.cache import cache
from django.core.signals import request_finished, setting_changed
from redis.backoff import NoBackoff
from redis.connection import ConnectionInterface
from redis.retry import Retry
from redis.utils import str_if_bytes

from core.request_scope import in_request

logger = logging.getLogger("gateway.cache")

GENERATION_KEY = "config:generation"


def config_cache_enabled() -> bool:
    """Whether the configuration caches (and so the watch) are on: a shared cache (REDIS_URL) and a
    positive GATEWAY_CONFIG_CACHE_SECONDS."""
    return bool(settings.REDIS_URL) and settings.GATEWAY_CONFIG_CACHE_SECONDS > 0


_key_watchers: dict[str, Callable[[str | None], None]] = {}


def key_changes_watch(prefix: str, changed: Callable[[str | None], None]) -> None:
    """Have Redis report to this process every change of the cache's keys that start with `prefix`, on
    the configuration watch's connection (`GenerationWatch`): `changed(rest)` gets the rest of each
    changed key, and None when anything may have changed (the connection was made or lost, a
    FLUSHDB). It is called with the watch's lock held, so it must be quick and must not use the
    watch. Register in an AppConfig.ready(): a connection tracks the prefixes registered when it is made.
    """
    _key_watchers[prefix] = changed


def key_changes_receive() -> None:
    """Hand to the callbacks what Redis has reported so far, without waiting: before taking a token
    of what the callbacks keep, so that changes made before a read cannot void what it finds."""
    if config_cache_enabled():
        _watch.receive()


def key_changes_reported(read_at: float) -> bool:
    """Whether every change of a watched key made since `read_at` (a time.monotonic() taken before
    reading the keys) has been handed to its callback. False when that cannot be promised (no Redis,
    the watch off or not armed yet, the connection not proven recently): rely on an expiry then."""
    return config_cache_enabled() and _watch.vouches(read_at)


class GenerationWatch:
    """The generation as this process last read it, for as long as Redis has said nothing about it;
    and the same promise for other keys of the cache (`key_changes_watch`): the circuit breaker's.

    One Redis connection per process (RESP2), made with redis-py's public API: it asks for its own
    client id, turns on `CLIENT TRACKING ON REDIRECT <that id> BCAST PREFIX <the counter's key>` (plus a
    PREFIX for each watched prefix) and subscribes to `__redis__:invalidate`. From then on Redis
    publishes a message on it whenever such a key changes (a write, an expiry, an eviction, a
    FLUSHDB), whoever changes it; the process sends nothing on it but PING. A request then takes the
    generation last read as long as:

    - every message that has arrived was handed on (`_poll`: `Connection.can_read(timeout=0)`, which
      does not wait, then what is there is read): one about the counter's key (or a FLUSHDB) means
      "read it again", one about a watched prefix goes to its callback. Redis writes the message in
      the same pass of its event loop as the change's own answer, so on one host a process asked after
      a change has returned finds it waiting; across a network, a lost packet can delay it, never
      beyond `trust_seconds`;
    - it was read after the watch was armed, and nothing about it arrived from before the read until
      now;
    - the connection is proven to have delivered what Redis sent up to `trust_seconds` ago: the value
      was read within `trust_seconds`, or a PING sent within `trust_seconds` has been answered (Redis
      answers on the connection in order, so its PONG follows every message of a change made before
      it). A PING goes out, without waiting for it, when the last proof is `trust_seconds / 2` old:
      from `_poll` outside a request, and once a request has answered (`after_request`, on Django's
      `request_finished`), so a process with calls at least that often never reads the counter
      again while nothing changes. A PING unanswered for `trust_seconds` (a connection dead without
      a reset) closes the connection; the next read makes a new one.

    Otherwise the counter is read from Redis (`read`). Anything unusual (an end of file, an error, a
    reply it does not know) closes the connection: the callbacks hear None ("anything may have
    changed") and every use reads Redis until `read` has made a new one. A server that refuses CLIENT
    TRACKING (Redis before 6, an ACL without CLIENT, some proxies) leaves the watch off: every request
    reads the counter; it is tried again every `retry_seconds`. `connect` returns a new, unconnected
    RESP2 redis-py connection and the counter's full key (default: from REDIS_URL).
    """

    def __init__(
        self,
        *,
        connect: Callable[[], tuple[ConnectionInterface, str]] | None = None,
        trust_seconds: float = 1.0,
        retry_seconds: float = 30.0,
    ) -> None:
        self.connect = connect or _watch_connection
        self.trust_seconds = trust_seconds
        self.retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._connection: ConnectionInterface | None = None
        self._key = ""  # the counter's full key
        self._prefixes: dict[str, Callable[[str | None], None]] = {}  # full prefix -> callback
        # +1 when the counter may have changed or the connection changes: reads before it are void.
        self._epoch = 0
        self._known: tuple[int, float] | None = None  # (generation, monotonic time of its read)
        self._proven_at = 0.0  # monotonic time up to which every message Redis sent has arrived
        self._ping_sent: float | None = None  # monotonic time of the PING not yet answered
        self._retry_at = 0.0

    @property
    def armed(self) -> bool:
        return self._connection is not None

    def generation(self) -> int | None:
        """The generation last read, while nothing says it changed; None: `read` it."""
        if self._known is None or self._connection is None:
            return None
        self._poll()
        known = self._known
        if known is None or not self._proven(known[1]):
            return None
        return known[0]

    def vouches(self, read_at: float) -> bool:
        """Whether every change Redis made to a watched key since `read_at` (a time.monotonic() taken
        before a read of such keys) has been handed to its callback: the watch is armed, what arrived
        is handed on, and the connection is proven up to `trust_seconds` ago or the read is that recent.
        A caller that took its read before the watch was armed hears None from the arming."""
        if self._connection is None:
            return False
        self._poll()
        return self._proven(read_at)

    def receive(self) -> None:
        """Hand on what Redis has pushed so far, without waiting."""
        self._poll()

    def read(self, get: Callable[[], int | None]) -> int | None:
        """`get()` the generation from Redis, with the watch armed first so that any change after the
        read is published; keep it for `generation` unless something arrived meanwhile."""
        with self._lock:
            self._known = None
            self._drain()
            connect = self._connection is None and time.monotonic() >= self._retry_at
            if connect:  # this caller makes the connection; the others meanwhile read without one
                self._retry_at = time.monotonic() + self.retry_seconds
        if connect:
            self._arm()  # outside the lock: a slow connect holds up no other request
        with self._lock:
            armed, epoch = self._connection is not None, self._epoch
        read_at = time.monotonic()
        generation = get()
        if armed and generation is not None:
            with self._lock:
                if self._epoch == epoch and self._connection is not None:
                    self._known = (generation, read_at)
        return generation

    def forget(self) -> None:
        """Read the generation from Redis at the next use."""
        with self._lock:
            self._known = None
            self._epoch += 1

    def close(self) -> None:
        with self._lock:
            self._close()

    def _proven(self, read_at: float) -> bool:
        return self._connection is not None and (
            time.monotonic() - max(read_at, self._proven_at) < self.trust_seconds
        )

    def after_request(self) -> None:
        """A request has answered: send the PING its polls left (see `_poll`), if one is due."""
        if self._connection is None:
            return
        with self._lock:
            self._ping_if_due()

    def _poll(self) -> None:
        """Hand on what Redis pushed; outside a request, send a PING when one is due.

        Inside a request the PING waits for `after_request`: it would wake Redis, and on a machine with
        few cores the answer's first byte would wait meanwhile. Only ever under the lock: a redis-py
        connection is not safe to read from two threads (or greenlets) at once, and one caller may be
        inside `read_response` while another asks."""
        if self._connection is None:
            return
        with self._lock:
            self._drain()
            if self._connection is None:
                return
            if self._ping_sent is None:
                if not in_request():
                    self._ping_if_due()
            elif time.monotonic() - self._ping_sent >= self.trust_seconds:
                logger.warning("Redis did not answer the configuration watch's PING; connecting again")
                self._close()

    def _ping_if_due(self) -> None:
        """Send a PING, not waited for, when the last proof is half `trust_seconds` old and none is
        unanswered (the lock held)."""
        connection = self._connection
        if connection is None or self._ping_sent is not None:
            return
        now = time.monotonic()
        if now - self._proven_at < self.trust_seconds / 2:
            return
        try:
            connection.send_command("PING")
        except Exception:
            self._close()
            return
        self._ping_sent = now

    def _drain(self) -> None:
        """Read and hand on what Redis published (the lock held); close on end of file or an error."""
        connection = self._connection
        if connection is None:
            return
        try:
            while connection.can_read(timeout=0):
                self._receive(connection.read_response())
        except Exception:
            self._close()

    def _receive(self, message: Any) -> None:
        kind = str_if_bytes(message[0]) if isinstance(message, list) and message else None
        if kind == "pong":
            if self._ping_sent is not None:
                self._proven_at, self._ping_sent = self._ping_sent, None
            return
        keys = message[2] if kind == "message" and len(message) == 3 else None
        if not isinstance(keys, list):  # a FLUSHDB or FLUSHALL (no keys), or a reply we do not know
            self._changed_all()
            return
        for raw in keys:
            key = str_if_bytes(raw)
            if key == self._key:
                self._known = None
                self._epoch += 1
                continue
            for prefix, changed in self._prefixes.items():
                if key.startswith(prefix):
                    changed(key[len(prefix) :])

    def _changed_all(self) -> None:
        self._known = None
        self._epoch += 1
        for changed in self._prefixes.values():
            changed(None)

    def _arm(self) -> None:
        """Make the tracking connection (`read` lets one caller at a time try, at most every
        retry_seconds after a failure)."""
        connection = None
        try:
            connection, key = self.connect()
            prefixes = {cache.make_and_validate_key(name): changed for name, changed in _key_watchers.items()}
            connection.connect()  # AUTH, SELECT and the client name, every answer read
            connection.send_command("CLIENT", "ID")
            client_id = connection.read_response()
            tracked = [part for prefix in (key, *prefixes) for part in ("PREFIX", prefix)]
            connection.send_command("CLIENT", "TRACKING", "ON", "REDIRECT", client_id, "BCAST", *tracked)
            answer = connection.read_response()  # a refusal raises here
            if str_if_bytes(answer) != "OK":
                raise redis.ConnectionError(f"CLIENT TRACKING was answered {answer!r}")
            connection.send_command("SUBSCRIBE", INVALIDATION_CHANNEL)
            connection.read_response()  # the subscription's confirmation
        except Exception:
            logger.warning(
                "Redis does not push configuration changes to this process (retrying in %s s); "
                "every request reads the configuration generation meanwhile",
                self.retry_seconds,
                exc_info=True,
            )
            if connection is not None:
                with contextlib.suppress(Exception):
                    connection.disconnect()
            return
        with self._lock:
            self._connection, self._key, self._prefixes = connection, key, prefixes
            self._proven_at, self._ping_sent = 0.0, None
            self._changed_all()  # what was read before the watch could not be told of changes

    def _close(self) -> None:
        connection = self._connection
        self._connection = self._known = self._ping_sent = None
        self._retry_at = 0.0  # a connection that was working: make a new one at the next read
        self._changed_all()
        if connection is not None:
            with contextlib.suppress(Exception):  # closing a connection that may be gone already
                connection.disconnect()


INVALIDATION_CHANNEL = "__redis__:invalidate"
WATCH_CLIENT_NAME = "igw-config-watch"  # as CLIENT LIST shows each process's watch connection


def _watch_connection() -> tuple[ConnectionInterface, str]:
    """A new RESP2 connection to REDIS_URL's server and database (credentials and TLS included), and
    the counter's full key as the Django cache writes it. No retries: an error closes the watch."""
    if not settings.REDIS_URL:
        raise redis.ConnectionError("REDIS_URL is not set")
    pool = redis.ConnectionPool.from_url(
        settings.REDIS_URL,
        protocol=2,
        client_name=WATCH_CLIENT_NAME,
        retry=Retry(NoBackoff(), 0),
        socket_connect_timeout=settings.CACHES["default"].get("OPTIONS", {}).get("socket_connect_timeout"),
    )
    return pool.make_connection(), cache.make_and_validate_key(GENERATION_KEY)


_watch = GenerationWatch()


def generation_watch() -> GenerationWatch:
    """This process's watch (a forked process gets a new one)."""
    return _watch


def _watch_reset_in_child() -> None:
    """A forked process must not share its parent's connection: it makes its own."""
    global _watch
    _watch = GenerationWatch()


os.register_at_fork(after_in_child=_watch_reset_in_child)


def _setting_changed(*, setting: str, **_: Any) -> None:
    if setting in ("CACHES", "REDIS_URL"):
        _watch.close()


setting_changed.connect(_setting_changed, dispatch_uid="config_generation_setting_changed")


def _request_finished(**_: Any) -> None:
    if config_cache_enabled():
        _watch.after_request()  # the PING a request's polls leave for after its answer


request_finished.connect(_request_finished, dispatch_uid="config_watch_request_finished")
