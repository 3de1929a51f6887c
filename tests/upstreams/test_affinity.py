"""Sticky routing in the domain (upstreams/affinity.py): the order `upstreams_route` gives a call
naming a conversation, what the resilience loop records, the mapping's keys and lifetime, and where it
lives with Redis, without it, and while it is down (failing open or closed)."""

from __future__ import annotations

import hashlib
import time
from collections import Counter

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings

from tests.factories import text_model_make
from tests.process_state import redis_health_fresh
from tests.redis_process import redis_process
from upstreams import affinity as affinity_module
from upstreams.affinity import Affinity, affinity_make, affinity_upstream_get, affinity_upstream_record
from upstreams.providers.base import UpstreamError
from upstreams.resilience import upstream_call_resilient
from upstreams.routing import upstreams_route
from upstreams.services import upstream_upsert

pytestmark = pytest.mark.django_db

LABEL = "chat.TextModel"
LOCMEM = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "igw-test"}}
DRAWS = 40  # a weighted draw between two equal upstreams picks one first 40 times in a row 2^-39 of the time


@pytest.fixture(autouse=True)
def clean_cache():
    cache.clear()
    yield
    cache.clear()


def upstream(name: str, *, priority: int = 0, enabled: bool = True):
    row, _ = upstream_upsert(
        name=name,
        kind="demo",
        base_url="",
        api_key_env="",
        timeout_seconds=30,
        priority=priority,
        weight=1,
        enabled=enabled,
    )
    return row


def model_of(chat_group, *upstreams):
    return text_model_make(model_id="sticky-chat", group=chat_group, upstreams=list(upstreams))


def conversation(model, key: str = "conversation-1", seconds: int = 60) -> Affinity:
    made = affinity_make(model_label=LABEL, model_pk=model.pk, conversation_key=key, seconds=seconds)
    assert made is not None
    return made


def firsts(model, affinity: Affinity | None) -> Counter:
    return Counter(
        upstreams_route(model_label=LABEL, model_pk=model.pk, affinity=affinity).upstreams[0].name
        for _ in range(DRAWS)
    )


def orders(model, affinity: Affinity | None) -> set[tuple[str, ...]]:
    return {
        tuple(
            u.name for u in upstreams_route(model_label=LABEL, model_pk=model.pk, affinity=affinity).upstreams
        )
        for _ in range(DRAWS)
    }


def test_a_conversation_goes_first_to_the_upstream_that_answered_it(chat_group):
    a, b = upstream("a"), upstream("b")
    model = model_of(chat_group, a, b)
    sticky = conversation(model)

    affinity_upstream_record(affinity=sticky, upstream_id=b.pk)

    assert firsts(model, sticky) == Counter({"b": DRAWS})
    # Another conversation, and a call naming none, keep the weighted draw.
    assert set(firsts(model, conversation(model, "conversation-2"))) == {"a", "b"}
    assert set(firsts(model, None)) == {"a", "b"}


def test_stickiness_never_puts_a_fallback_before_a_preferred_upstream(chat_group):
    preferred, b, c = upstream("preferred"), upstream("b", priority=1), upstream("c", priority=1)
    model = model_of(chat_group, preferred, b, c)
    sticky = conversation(model)

    affinity_upstream_record(affinity=sticky, upstream_id=c.pk)
    assert orders(model, sticky) == {("preferred", "c", "b")}

    affinity_upstream_record(affinity=sticky, upstream_id=b.pk)
    assert orders(model, sticky) == {("preferred", "b", "c")}


def test_a_disabled_upstream_is_passed_over(chat_group, django_capture_on_commit_callbacks):
    a, b, disabled = upstream("a"), upstream("b"), upstream("disabled")
    model = model_of(chat_group, a, b, disabled)
    sticky = conversation(model)
    affinity_upstream_record(affinity=sticky, upstream_id=disabled.pk)
    assert firsts(model, sticky) == Counter({"disabled": DRAWS})

    with django_capture_on_commit_callbacks(execute=True):  # the commit's cache invalidation
        upstream_upsert(
            name="disabled", kind="demo", base_url="", api_key_env="", timeout_seconds=30, priority=0,
            weight=1, enabled=False,
        )  # fmt: skip

    assert set(firsts(model, sticky)) == {"a", "b"}


@pytest.mark.parametrize(
    ("upstreams", "kept"),
    [
        ([("a", 0, True)], False),
        ([("a", 0, True), ("b", 1, True)], False),  # a fallback is never chosen by stickiness
        ([("a", 0, True), ("b", 0, True)], True),
        ([("a", 0, True), ("b", 0, False)], True),  # a conversation on `b` must move to `a`
    ],
)
def test_a_conversation_is_kept_only_where_a_priority_has_a_choice(chat_group, upstreams, kept):
    model = model_of(chat_group, *(upstream(n, priority=p, enabled=e) for n, p, e in upstreams))
    sticky = conversation(model)

    routed = upstreams_route(model_label=LABEL, model_pk=model.pk, affinity=sticky)

    assert routed.affinity == (sticky if kept else None)


def test_the_mapping_is_keyed_by_a_digest_of_the_model_and_the_conversation(chat_group):
    model = model_of(chat_group, upstream("a"), upstream("b"))
    other = text_model_make(model_id="other-chat", group=chat_group, upstreams=[upstream("a")])

    sticky = conversation(model, "claude-session-42")

    digest = hashlib.sha256(f"chat.textmodel:{model.pk}\nclaude-session-42".encode()).hexdigest()
    assert sticky == Affinity(key=f"affinity:{digest}", seconds=60)
    assert "claude-session-42" not in sticky.key
    assert conversation(other, "claude-session-42").key != sticky.key


@pytest.mark.parametrize(("key", "seconds"), [(None, 60), ("", 60), ("conversation-1", 0)])
def test_no_conversation_or_no_seconds_is_no_stickiness(chat_group, key, seconds):
    model = model_of(chat_group, upstream("a"), upstream("b"))
    assert affinity_make(model_label=LABEL, model_pk=model.pk, conversation_key=key, seconds=seconds) is None


def test_the_mapping_expires_after_its_seconds_and_each_use_renews_it(chat_group):
    a, b = upstream("a"), upstream("b")
    model = model_of(chat_group, a, b)
    renewed, left = conversation(model, "renewed", seconds=2), conversation(model, "left", seconds=2)
    affinity_upstream_record(affinity=renewed, upstream_id=a.pk)
    affinity_upstream_record(affinity=left, upstream_id=a.pk)

    time.sleep(1.2)
    affinity_upstream_record(affinity=renewed, upstream_id=a.pk)  # a call used it
    time.sleep(1.2)

    assert affinity_upstream_get(affinity=renewed) == a.pk
    assert affinity_upstream_get(affinity=left) is None


@pytest.mark.skipif(not settings.REDIS_URL, reason="inspects the shared Redis: needs REDIS_URL")
def test_with_redis_the_mapping_is_one_key_holding_the_upstream_id_with_its_ttl(chat_group):
    a, b = upstream("a"), upstream("b")
    model = model_of(chat_group, a, b)
    sticky = conversation(model, "conversation-1", seconds=900)

    affinity_upstream_record(affinity=sticky, upstream_id=b.pk)

    client = redis.Redis.from_url(settings.REDIS_URL)
    stored = cache.make_key(sticky.key)
    assert client.get(stored) == str(b.pk).encode()
    assert 895 <= client.ttl(stored) <= 900
    assert affinity_module._local.get(sticky.key) is None  # nothing kept per process


def test_without_redis_the_mapping_is_kept_in_this_process(chat_group):
    a, b = upstream("a"), upstream("b")
    with override_settings(REDIS_URL="", CACHES=LOCMEM):
        model = model_of(chat_group, a, b)
        sticky = conversation(model)
        affinity_upstream_record(affinity=sticky, upstream_id=b.pk)

        assert firsts(model, sticky) == Counter({"b": DRAWS})
        # In its own bounded memory, not among the default cache's few hundred entries.
        assert affinity_module._local.get(sticky.key) == b.pk
        assert cache.get(sticky.key) is None


@pytest.fixture
def own_redis(monkeypatch):
    with redis_process() as server, override_settings(REDIS_URL=server.url, CACHES=server.caches()):
        redis_health_fresh(monkeypatch)
        yield server


def test_redis_down_failing_open_keeps_the_mapping_in_this_process(chat_group, own_redis):
    a, b = upstream("a"), upstream("b")
    model = model_of(chat_group, a, b)
    sticky = conversation(model)
    affinity_upstream_record(affinity=sticky, upstream_id=a.pk)
    assert affinity_module._local.get(sticky.key) is None

    own_redis.stop()

    assert affinity_upstream_get(affinity=sticky) is None  # Redis's mapping is out of reach
    affinity_upstream_record(affinity=sticky, upstream_id=b.pk)
    assert affinity_upstream_get(affinity=sticky) == b.pk
    assert affinity_module._local.get(sticky.key) == b.pk


@override_settings(GATEWAY_REDIS_FAILURE_MODE="closed")
def test_redis_down_failing_closed_routes_without_stickiness_and_never_raises(chat_group, own_redis):
    a, b = upstream("a"), upstream("b")
    model = model_of(chat_group, a, b)
    sticky = conversation(model)
    affinity_upstream_record(affinity=sticky, upstream_id=b.pk)

    own_redis.stop()

    affinity_upstream_record(affinity=sticky, upstream_id=b.pk)
    assert affinity_upstream_get(affinity=sticky) is None
    assert affinity_module._local.get(sticky.key) is None
    assert set(firsts(model, sticky)) == {"a", "b"}


def classify(error, upstream):
    return RuntimeError(f"{upstream.name}: {error}")


def test_the_upstream_that_answers_after_a_failover_keeps_the_conversation(chat_group):
    a, b = upstream("a"), upstream("b")
    model = model_of(chat_group, a, b)
    sticky = conversation(model)
    affinity_upstream_record(affinity=sticky, upstream_id=a.pk)
    tried: list[str] = []

    def attempt(target, deadline):
        tried.append(target.name)
        if target.name == "a":
            raise UpstreamError("down", status=500, retryable=True)
        return "answer"

    result, answered = upstream_call_resilient(
        upstreams=upstreams_route(model_label=LABEL, model_pk=model.pk, affinity=sticky).upstreams,
        attempt=attempt,
        classify=classify,
        affinity=sticky,
    )

    assert (result, answered.name, tried) == ("answer", "b", ["a", "b"])
    assert affinity_upstream_get(affinity=sticky) == b.pk


def test_a_call_that_no_upstream_answers_leaves_the_mapping_alone(chat_group):
    a, b = upstream("a"), upstream("b")
    model = model_of(chat_group, a, b)
    sticky = conversation(model)
    affinity_upstream_record(affinity=sticky, upstream_id=a.pk)

    def attempt(target, deadline):
        raise UpstreamError("bad request", status=400, retryable=False)

    with pytest.raises(RuntimeError):
        upstream_call_resilient(
            upstreams=upstreams_route(model_label=LABEL, model_pk=model.pk, affinity=sticky).upstreams,
            attempt=attempt,
            classify=classify,
            affinity=sticky,
        )

    assert affinity_upstream_get(affinity=sticky) == a.pk
