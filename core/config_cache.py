"""Per-process caches of what rarely changes (credentials, groups, models, upstreams), kept exact by
one shared counter: the configuration generation.

Every entry is stored with the generation it was read under and is used only while the shared counter
(one key in the Django cache, i.e. Redis) still holds that value. Every write that can change a cached
answer bumps the counter once its transaction has committed (`config_generation_bump_on_commit`), so
at its next request every process on every machine drops what it held: a revoked key or a deactivated
user is refused at once everywhere, and a price or upstream change applies to the next call.

The counter is taken at most once per request (the memo is reset by Django's `request_started`);
outside a request (commands, tests calling services) on every use. Taking it asks Redis only when
Redis has said something since the last read: each process keeps one Redis connection on which Redis
publishes a message the moment the counter's key changes (`GenerationWatch`), and the process checks,
without waiting, that nothing arrived on it; a PING sent now and then without waiting for it proves
the connection alive. Other modules have changes of their own keys reported on the same connection
(`key_changes_watch`: the circuit breaker's). Caching is on only when the cache
is shared between processes (REDIS_URL); without it, or when Redis cannot be reached, callers query the
database as if there were no cache. Entries also expire after GATEWAY_CONFIG_CACHE_SECONDS, a backstop
should a bump ever be lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
from django.apps import apps
from django.conf import settings
from django.core.cache import cache
from django.core.signals import request_finished, request_started, setting_changed
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.utils import timezone
from oauth2_provider.settings import oauth2_settings
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.utils import str_if_bytes

from core.redis_health import RedisUnavailable, redis_available, redis_guarded, redis_guarded_now
from core.request_scope import in_request

logger = logging.getLogger("gateway.cache")

GENERATION_KEY = "config:generation"

V = TypeVar("V")

_local = threading.local()
_caches: list[GenerationCache[Any]] = []
_local_state_clears: list[Callable[[], None]] = []


def local_state_register(clear: Callable[[], None]) -> None:
    """Have `clear` called with the caches: other per-process views of shared state (the circuit
    breaker's) are dropped by every configuration change, and between tests."""
    _local_state_clears.append(clear)


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


def config_cache_enabled() -> bool:
    return bool(settings.REDIS_URL) and settings.GATEWAY_CONFIG_CACHE_SECONDS > 0


def config_generation() -> int | None:
    """The shared generation (memoized for the current request), or None when caching is off or the
    shared cache cannot be read: then nothing may be served from a cache."""
    if not config_cache_enabled():
        return None
    serving = in_request()
    if serving and hasattr(_local, "generation"):
        return _local.generation
    generation = _watch.generation()
    if generation is None and not redis_available():
        return None  # Redis failed a moment ago: not tried again before GATEWAY_REDIS_RETRY_SECONDS
    if generation is None:
        generation = _watch.read(_generation_get)
    if serving:
        _local.generation = generation
    return generation


def _generation_get() -> int | None:
    """The counter as Redis holds it now (one round trip), or None when Redis cannot be read."""

    def read() -> Any:
        value = cache.get(GENERATION_KEY)
        if value is None:
            # First use (or Redis lost the key): start a counter, from the clock so that it cannot
            # come back to a value some process still holds entries under. `add` keeps a concurrent bump.
            cache.add(GENERATION_KEY, time.time_ns() // 1_000_000, timeout=None)
            value = cache.get(GENERATION_KEY)
        return value

    try:
        value = redis_guarded(read)
    except RedisUnavailable:
        # Redis down (logged once per outage by redis_health): no cache, the database answers every
        # read until Redis is back; not even tried for GATEWAY_REDIS_RETRY_SECONDS after a failure.
        return None
    return int(value) if value is not None else None


def config_generation_bump() -> None:
    """Invalidate every process's cached configuration now (this process's at once, the others' at
    their next request)."""
    if settings.REDIS_URL:

        def bump() -> None:
            try:
                cache.incr(GENERATION_KEY)
            except ValueError:  # no counter yet: any value differs from what no entry was stored under
                cache.set(GENERATION_KEY, time.time_ns() // 1_000_000, timeout=None)

        try:
            # Tried even while Redis is marked down: a lost bump is worse than a refused connection.
            redis_guarded_now(bump)
        except Exception:
            # The entries still expire after GATEWAY_CONFIG_CACHE_SECONDS; say loudly that until then
            # a change may not be seen by every process.
            logger.error(
                "could not bump the configuration generation; caches expire within %s s",
                settings.GATEWAY_CONFIG_CACHE_SECONDS,
                exc_info=True,
            )
    config_caches_clear()


def config_generation_bump_on_commit() -> None:
    """Bump once the current transaction commits (at once outside one): a bump before the commit would
    let another process cache the old rows again in between. A transaction writing N rows bumps N
    times (one INCR each, at commit); writes of configuration are rare."""
    transaction.on_commit(config_generation_bump)


# --- What invalidates ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Invalidating:
    """Writes to the model `label` ("app_label.ModelName"; an auto-created many-to-many through model
    for a relation's additions and removals) change what the caches hold, so each bumps the generation
    once it commits.

    - `fields_not_cached`: a save touching only these columns changes no cached answer;
    - `new_rows`: whether a new row does (yes where a cache lists every row: groups, image models,
      upstreams; no for credentials, users and accounts, which no cached answer can refer to before
      they exist);
    - `deletion_invalidates`: a test of the deleted row (None: every deletion invalidates).
    """

    label: str
    fields_not_cached: frozenset[str] = frozenset()
    new_rows: bool = False
    deletion_invalidates: Callable[[Any], bool] | None = None


def _access_token_live(access_token: Any) -> bool:
    # An expired token is refused wherever it is cached (expiry is checked on every request), so
    # cleartokens' bulk deletions of expired tokens invalidate nothing. django-oauth-toolkit revokes a
    # token by deleting its row: that one does.
    return access_token.expires > timezone.now()


def invalidating_models() -> tuple[Invalidating, ...]:
    """The one list of the models whose writes invalidate the configuration caches.

    `QuerySet.update()` sends no signal: a service that updates one of these models that way bumps
    itself (`api_key_revoke`); `QuerySet.delete()` sends post_delete for every row. Refresh tokens
    authenticate nothing under /v1, and revoking one deletes its access token, which invalidates.
    """
    return (
        # A user's is_active; sign-ins write only last_login.
        Invalidating("accounts.User", fields_not_cached=frozenset({"last_login"})),
        # An account's current group; the groups it may use (both sides of the relation).
        Invalidating("accounts.Account"),
        Invalidating("accounts.Account_allowed_groups"),
        # Revocation, expiry, group or label; keys/services.py keeps its own mark of last_used_at.
        Invalidating("keys.ApiKey", fields_not_cached=frozenset({"last_used_at"})),
        # A token's scope or expiry, or its deletion; an application's name labels its tokens.
        Invalidating(oauth2_settings.ACCESS_TOKEN_MODEL, deletion_invalidates=_access_token_live),
        Invalidating(oauth2_settings.APPLICATION_MODEL),
        # Access decisions, limits, prices, capabilities and routing.
        Invalidating("groups.Group", new_rows=True),
        Invalidating("images.ImageModel", new_rows=True),
        Invalidating("images.ImageModel_upstreams"),
        Invalidating("chat.TextModel", new_rows=True),
        Invalidating("chat.TextModel_upstreams"),
        Invalidating("upstreams.Upstream", new_rows=True),
    )


_invalidating: dict[type[Any], Invalidating] = {}


def invalidation_receivers_connect() -> None:
    """Connect the receivers for `invalidating_models()` (CoreConfig.ready: core imports no app)."""
    for entry in invalidating_models():
        model = apps.get_model(entry.label)
        _invalidating[model] = entry
        uid = f"config_cache_{entry.label}"
        if model._meta.auto_created:
            m2m_changed.connect(_relation_changed, sender=model, dispatch_uid=f"{uid}_m2m")
        else:
            post_save.connect(_saved, sender=model, dispatch_uid=f"{uid}_saved")
            post_delete.connect(_deleted, sender=model, dispatch_uid=f"{uid}_deleted")


def _saved(*, sender: type[Any], created: bool, update_fields: frozenset[str] | None, **_: Any) -> None:
    entry = _invalidating[sender]
    if created and not entry.new_rows:
        return
    if update_fields is not None and update_fields <= entry.fields_not_cached:
        return
    config_generation_bump_on_commit()


def _deleted(*, sender: type[Any], instance: Any, **_: Any) -> None:
    test = _invalidating[sender].deletion_invalidates
    if test is None or test(instance):
        config_generation_bump_on_commit()


def _relation_changed(*, action: str, **_: Any) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        config_generation_bump_on_commit()


def config_caches_clear() -> None:
    """Drop this process's entries (tests call it between tests)."""
    _local.__dict__.pop("generation", None)
    _watch.forget()
    for entry_cache in _caches:
        entry_cache.clear()
    for clear in _local_state_clears:
        clear()


class GenerationCache(Generic[V]):
    """A bounded per-process map whose entries are valid for one generation and a maximum age."""

    def __init__(self, *, name: str, max_entries: int = 10_000) -> None:
        self.name = name
        self.max_entries = max_entries
        self._entries: dict[Any, tuple[int, float, V]] = {}
        self._lock = threading.Lock()
        _caches.append(self)

    def get_or_load(self, key: Any, load: Callable[[], V]) -> V:
        """The cached value for `key` under the current generation, else `load()` (cached when the
        generation is known)."""
        generation = config_generation()
        if generation is None:
            return load()
        now = time.monotonic()
        entry = self._entries.get(key)
        max_age = settings.GATEWAY_CONFIG_CACHE_SECONDS
        if entry is not None and entry[0] == generation and now - entry[1] < max_age:
            return entry[2]
        value = load()
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # rare; cheaper and simpler than LRU bookkeeping on every hit
            self._entries[key] = (generation, now, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


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
    RESP2 `redis.Connection` and the counter's full key (default: from REDIS_URL).
    """

    def __init__(
        self,
        *,
        connect: Callable[[], tuple[redis.Connection, str]] | None = None,
        trust_seconds: float = 1.0,
        retry_seconds: float = 30.0,
    ) -> None:
        self.connect = connect or _watch_connection
        self.trust_seconds = trust_seconds
        self.retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._connection: redis.Connection | None = None
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


def _watch_connection() -> tuple[redis.Connection, str]:
    """A new RESP2 connection to REDIS_URL's server and database (credentials and TLS included), and
    the counter's full key as the Django cache writes it. No retries: an error closes the watch."""
    pool = redis.ConnectionPool.from_url(
        settings.REDIS_URL,
        protocol=2,
        client_name=WATCH_CLIENT_NAME,
        retry=Retry(NoBackoff(), 0),
        socket_connect_timeout=settings.CACHES["default"].get("OPTIONS", {}).get("socket_connect_timeout"),
    )
    return pool.make_connection(), cache.make_and_validate_key(GENERATION_KEY)


_watch = GenerationWatch()


def _watch_reset_in_child() -> None:
    """A forked process must not share its parent's connection: it makes its own."""
    global _watch
    _watch = GenerationWatch()


os.register_at_fork(after_in_child=_watch_reset_in_child)


def _setting_changed(*, setting: str, **_: Any) -> None:
    if setting in ("CACHES", "REDIS_URL"):
        _watch.close()


setting_changed.connect(_setting_changed, dispatch_uid="config_generation_setting_changed")


def _request_started(**_: Any) -> None:
    _local.__dict__.pop("generation", None)


def _request_finished(**_: Any) -> None:
    _local.__dict__.pop("generation", None)
    if config_cache_enabled():
        _watch.after_request()  # the PING a request's polls leave for after its answer


request_started.connect(_request_started, dispatch_uid="config_generation_request_started")
request_finished.connect(_request_finished, dispatch_uid="config_generation_request_finished")
