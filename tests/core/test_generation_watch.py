"""The configuration generation without a Redis round trip per request (`GenerationWatch`): read once,
then taken as read while Redis pushes nothing about its key; any change, from anywhere, is seen at the
very next use, and anything unusual (a dropped connection, a refusal, age) means reading Redis again.

Against a real Redis (REDIS_URL), which reports the commands it received (MONITOR,
tests/redis_commands.py).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from core import config_watch
from core.config_cache import GENERATION_KEY, config_generation, config_generation_bump
from core.config_watch import WATCH_CLIENT_NAME, GenerationWatch
from keys.services import api_key_create
from tests.redis_commands import redis_commands
from tests.request_signals import serving_a_request

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis: set REDIS_URL")


@pytest.fixture
def server() -> redis.Redis:
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.close()


def tracking_clients(server: redis.Redis) -> list[dict]:
    """The watch connections (this test process's: no other gateway process runs meanwhile), each
    with broadcast tracking on (flags t and B)."""
    clients = [c for c in server.client_list() if c["name"] == WATCH_CLIENT_NAME]
    assert all("t" in c["flags"] and "B" in c["flags"] for c in clients)
    return clients


def full_key() -> str:
    return cache.make_and_validate_key(GENERATION_KEY)


def settled() -> int:
    """The generation once read and watched. The first read may create the counter, itself a change
    that Redis pushes: the use after it reads again."""
    config_generation()
    return config_generation()


def test_it_reads_the_generation_from_redis_once_while_nothing_changes(server):
    first = settled()
    with redis_commands() as seen:
        assert {config_generation() for _ in range(50)} == {first}
    assert seen.naming(full_key()) == []
    assert tracking_clients(server)


def test_a_change_made_elsewhere_is_seen_at_the_very_next_use(server):
    first = settled()
    server.incr(full_key())  # another process's bump
    assert config_generation() == first + 1
    server.set(full_key(), first + 10**9)
    assert config_generation() == first + 10**9
    server.delete(full_key())  # lost (a restart without persistence, an eviction): a new one from the clock
    recreated = config_generation()
    assert recreated != first + 10**9
    assert recreated == int(server.get(full_key()))
    settled()
    with redis_commands() as seen:
        config_generation()
    assert seen.naming(full_key()) == []  # watched again


def test_a_bump_in_this_process_is_seen_at_once():
    first = config_generation()
    config_generation_bump()
    assert config_generation() == first + 1


def test_a_dropped_connection_means_reading_redis_and_watching_again(server):
    settled()
    (watching,) = tracking_clients(server)
    server.client_kill_filter(_id=watching["id"])
    server.incr(full_key())  # a change the dropped connection could not have told
    expected = int(server.get(full_key()))

    assert config_generation() == expected
    assert watching["id"] not in {c["id"] for c in tracking_clients(server)}
    assert tracking_clients(server)  # a new one
    with redis_commands() as seen:
        assert config_generation() == expected
    assert seen.naming(full_key()) == []
    server.incr(full_key())
    assert config_generation() == expected + 1


def read_from(server: redis.Redis):
    def get() -> int:
        return int(server.get(full_key()) or 0)

    return get


def test_a_value_read_while_a_change_arrived_is_not_kept(server):
    watch = GenerationWatch()
    server.set(full_key(), 100)

    def stale_get() -> int:
        value = int(server.get(full_key()))
        server.incr(full_key())  # changed after the read, before the watch keeps the value
        return value

    try:
        assert watch.read(stale_get) == 100
        assert watch.armed
        assert watch.generation() is None  # the push is waiting: read again
        assert watch.read(read_from(server)) == 101
        assert watch.generation() == 101
    finally:
        watch.close()


def test_a_value_is_trusted_for_trust_seconds_at_most(server):
    watch = GenerationWatch(trust_seconds=0.05)
    server.set(full_key(), 7)
    try:
        assert watch.read(read_from(server)) == 7
        assert watch.generation() == 7
        time.sleep(0.06)
        assert watch.generation() is None
    finally:
        watch.close()


def counted(get):
    calls = []

    def counting() -> int:
        calls.append(1)
        return get()

    return counting, calls


def test_a_watch_in_use_stays_trusted_past_trust_seconds_on_answered_pings(server):
    watch = GenerationWatch(trust_seconds=0.2)
    server.set(full_key(), 7)
    get, reads = counted(read_from(server))
    try:
        assert watch.read(get) == 7
        deadline = time.monotonic() + 0.8  # four times trust_seconds
        while time.monotonic() < deadline:
            assert watch.generation() == 7
            time.sleep(0.02)
        assert reads == [1]  # the PINGs proved the connection; the counter was never read again
        server.incr(full_key())
        assert watch.generation() is None  # and a change is still seen at once
    finally:
        watch.close()


def test_an_unanswered_ping_ends_the_trust_and_the_connection(server, caplog):
    watch = GenerationWatch(trust_seconds=0.2)
    server.set(full_key(), 7)
    try:
        assert watch.read(read_from(server)) == 7
        assert watch.generation() == 7  # sends the first PING
        time.sleep(0.05)
        assert watch.generation() == 7  # its PONG: the connection is proven
        server.client_pause(1500, all=True)  # a server that no longer answers (nor pushes)
        with caplog.at_level(logging.WARNING, logger="gateway.cache"):
            deadline = time.monotonic() + 1.2
            while watch.generation() is not None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert watch.generation() is None
            while watch.armed and time.monotonic() < deadline:
                watch.generation()
                time.sleep(0.02)
        assert not watch.armed  # the PING went unanswered for trust_seconds: closed
        assert "did not answer" in caplog.text
        server.client_unpause()
        assert watch.read(read_from(server)) == 7  # a new connection
        assert watch.armed
        assert watch.generation() == 7
    finally:
        server.client_unpause()
        watch.close()


def test_in_a_request_the_due_ping_goes_out_once_the_request_has_answered(server):
    # A PING wakes Redis: on a machine with few cores the answer's first byte would wait for it.
    watch = GenerationWatch(trust_seconds=0.2)
    server.set(full_key(), 7)
    try:
        with serving_a_request():
            assert watch.read(read_from(server)) == 7
            time.sleep(0.12)  # the read's proof is past half trust_seconds: a PING is due
            assert watch.generation() == 7  # but none goes out on the request's way
            time.sleep(0.12)
            assert watch.generation() is None  # so nothing proves the connection past trust_seconds

            assert watch.read(read_from(server)) == 7
            time.sleep(0.12)
            watch.after_request()  # the request has answered: the due PING goes out
            time.sleep(0.12)
            assert watch.generation() == 7  # its PONG proves the connection past the read's trust
    finally:
        watch.close()


def test_changes_of_a_watched_prefix_go_to_its_callback_not_to_the_generation(server):
    heard: list[str | None] = []
    prefix = f"igw-test-{uuid.uuid4().hex[:8]}:"
    config_watch.key_changes_watch(prefix, heard.append)
    watch = GenerationWatch()
    server.set(full_key(), 7)
    get, reads = counted(read_from(server))
    try:
        assert watch.read(get) == 7
        assert heard == [None]  # armed: whatever was read before may have changed
        heard.clear()
        cache.set(f"{prefix}5:open_until", 1)
        cache.set(f"other-{prefix}5", 1)  # not under the prefix
        server.set(full_key() + "-not-the-counter", 1)
        deadline = time.monotonic() + 2
        while not heard and time.monotonic() < deadline:
            assert watch.generation() == 7
            time.sleep(0.01)
        assert heard == ["5:open_until"]
        assert watch.generation() == 7
        assert reads == [1]
        assert watch.vouches(time.monotonic())
        server.flushdb()  # everything may have changed
        server.set(full_key(), 8)
        assert watch.generation() is None
        assert None in heard
    finally:
        config_watch._key_watchers.pop(prefix, None)
        watch.close()


def test_a_server_that_refuses_tracking_leaves_every_use_reading_redis(server, caplog):
    user, password = f"igw-no-tracking-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    server.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all", "-client"]
    )
    kwargs = {**redis.connection.parse_url(settings.REDIS_URL), "username": user, "password": password}

    def connect():
        return redis.Connection(**kwargs, protocol=2), full_key()

    watch = GenerationWatch(connect=connect, retry_seconds=60)
    server.set(full_key(), 5)
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.cache"):
            assert watch.read(read_from(server)) == 5
        assert not watch.armed
        assert watch.generation() is None
        assert "does not push configuration changes" in caplog.text
        caplog.clear()
        assert watch.read(read_from(server)) == 5  # not tried again before retry_seconds
        assert caplog.text == ""
    finally:
        watch.close()
        server.acl_deluser(user)


def test_a_forked_process_makes_its_own_connection():
    from core import config_watch as generations

    config_generation()
    assert generations._watch.armed
    pid = os.fork()
    if pid == 0:  # the child: nothing inherited
        os._exit(0 if not generations._watch.armed else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert generations._watch.armed  # the parent's is untouched


def test_a_slow_connect_holds_up_no_other_read(server):
    connecting, release = threading.Event(), threading.Event()
    kwargs = redis.connection.parse_url(settings.REDIS_URL)

    def slow_connect():
        connecting.set()
        release.wait(10)  # a server that takes its time to accept
        return redis.Connection(**kwargs, protocol=2), full_key()

    watch = GenerationWatch(connect=slow_connect)
    server.set(full_key(), 3)
    first = threading.Thread(target=watch.read, args=(read_from(server),))
    first.start()
    try:
        assert connecting.wait(10)
        started = time.monotonic()
        assert watch.read(read_from(server)) == 3  # read without the connection being made
        assert time.monotonic() - started < 1
        assert not watch.armed
    finally:
        release.set()
        first.join(10)
    assert watch.armed  # the first caller made it
    assert watch.read(read_from(server)) == 3
    assert watch.generation() == 3
    watch.close()


def image_caller(client, key: str):
    """A billed image call with `key`, answering its status."""

    def call() -> int:
        return client.post(
            "/v1/images/generations",
            data=json.dumps({"model": "alpha-image-2", "prompt": "a red square", "size": "64x64"}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        ).status_code

    return call


@pytest.mark.django_db
def test_an_api_call_asks_redis_nothing_about_the_configuration_while_it_is_unchanged(
    server, client, alice, alpha_group, alpha_model
):
    call = image_caller(client, api_key_create(account=alice, group=alpha_group)[1])

    assert call() == 200
    settled()
    with redis_commands() as seen:
        assert call() == 200
    assert seen.naming(full_key()) == []

    server.incr(full_key())  # a change by another process: the next call reads the counter again
    with redis_commands() as seen:
        assert call() == 200
    assert [command.split()[0].upper() for command in seen.naming(full_key())] == ["GET"]


@pytest.mark.django_db
def test_calls_spaced_beyond_the_views_lifetimes_ask_redis_nothing_about_configuration_or_circuits(
    server, client, alice, alpha_group, alpha_model
):
    """Past CLEAN_VIEW_SECONDS and half of trust_seconds between calls (a stream or two a second),
    neither the generation nor the circuit is read again: the watch's answered PINGs vouch for both."""
    call = image_caller(client, api_key_create(account=alice, group=alpha_group)[1])

    assert call() == 200
    settled()
    assert call() == 200
    for _ in range(3):
        time.sleep(0.6)
        with redis_commands() as seen:
            assert call() == 200
        assert seen.naming(full_key()) == []
        assert [command for command in seen.circuit() if command.startswith("MGET")] == []


def test_threads_polling_while_changes_arrive_never_share_a_read_of_the_connection(server):
    """The connection is read only under the watch's lock: threads asking at once while Redis pushes
    a change after another all finish, and end up with the last value."""
    watch = GenerationWatch(trust_seconds=0.05)  # PINGs often too
    server.set(full_key(), 0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            while not stop.is_set():
                if watch.generation() is None:
                    watch.read(read_from(server))
                watch.vouches(time.monotonic())
        except BaseException as error:  # reported below
            errors.append(error)

    watch.read(read_from(server))
    threads = [threading.Thread(target=ask) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for _ in range(300):
            server.incr(full_key())
        time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    try:
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        assert watch.generation() in (None, 300)
        assert watch.read(read_from(server)) == 300
    finally:
        watch.close()
