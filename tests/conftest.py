"""Shared fixtures: a few named people (alice owns things, bob is another account, staff runs the
admin) and the spec's two image groups, built through the project's own services."""

from __future__ import annotations

from decimal import Decimal

import pytest
import requests

from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from core.config_cache import config_caches_clear
from groups.services import group_upsert
from images.services import image_model_upsert
from tests.factories import alpha_group_make, image_model_make, upstream_make
from tests.listening_process import listening_process
from tests.process_state import affinity_local_fresh, limits_local_fresh, redis_health_fresh
from upstreams.services import upstream_upsert


@pytest.fixture(autouse=True)
def _fresh_config_caches(monkeypatch):
    """Each test starts with empty per-process caches: rolled-back rows fire no invalidation, and the
    fixtures reuse ids (group 1, 2) from test to test. Redis counts as reachable, and the limits'
    per-process counters and slots, and its memory of sticky routing (used without Redis or while it
    is down), are new."""
    config_caches_clear()
    redis_health_fresh(monkeypatch)
    limits_local_fresh(monkeypatch)
    affinity_local_fresh(monkeypatch)
    yield
    config_caches_clear()


@pytest.fixture
def demo_upstream(db):
    upstream, _ = upstream_upsert(
        name="demo",
        kind="demo",
        base_url="",
        api_key_env="",
        timeout_seconds=60,
        priority=0,
        weight=1,
        enabled=True,
    )
    return upstream


@pytest.fixture
def alpha_group(db):
    return alpha_group_make()


@pytest.fixture
def beta_group(db):
    group, _ = group_upsert(
        group_id=2,
        name="Beta-API",
        status="active",
        image_enabled=True,
        billing="subscription",
        allow_group_override=False,
        rpm=0,
        concurrency=0,
    )
    return group


@pytest.fixture
def chat_group(db):
    """The demo configuration's text group (no image endpoints)."""
    group, _ = group_upsert(
        group_id=3,
        name="Demo-Chat",
        status="active",
        image_enabled=False,
        billing="balance",
        allow_group_override=True,
        rpm=0,
        concurrency=0,
    )
    return group


@pytest.fixture
def alpha_model(alpha_group, demo_upstream):
    model, _ = image_model_upsert(
        model_id="alpha-image-2",
        group=alpha_group,
        price=Decimal("0.15"),
        upstreams=[demo_upstream],
        upstream_model="",
        sizes=["1024x1024", "1024x1536", "64x64", "auto"],
        qualities=["low", "high"],
        styles=[],
        backgrounds=["transparent", "opaque"],
        output_formats=["png", "jpeg", "webp"],
        output_compression=(0, 100),
        max_n=4,
        edits_supported=True,
        stream_supported=False,
        default_response_format="b64_json",
        enabled=True,
    )
    return model


@pytest.fixture
def beta_model(beta_group, demo_upstream):
    """A model of Beta-API, the subscription group alice is not allowed to use."""
    return image_model_make(model_id="beta-imagine-image", group=beta_group, upstreams=[demo_upstream])


@pytest.fixture
def alice(alpha_group):
    account = account_create(username="alice", email="alice@example.com", password="alice-password-1")
    account_set_groups(account=account, allowed_groups=[alpha_group], current_group=alpha_group)
    wallet_top_up(account=account, amount="10.00", reference="fixture")
    return account


@pytest.fixture
def bob(alpha_group):
    account = account_create(username="bob", email="bob@example.com", password="bob-password-1")
    account_set_groups(account=account, allowed_groups=[alpha_group], current_group=alpha_group)
    return account


@pytest.fixture
def staff(db):
    account = account_create(
        username="staff", email="staff@example.com", password="staff-password-1", is_staff=True
    )
    user = account.user
    user.is_superuser = True
    user.save(update_fields=["is_superuser"])
    return user


@pytest.fixture
def staff_client(client, staff):
    client.force_login(staff)
    return client


class FakeUpstream:
    """Client of the fake upstream process (tests/fake_upstream.py)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._root = f"http://127.0.0.1:{port}"

    def script(self, path: str, *answers: dict) -> None:
        requests.post(f"{self._root}/_script", json={"path": path, "answers": list(answers)}, timeout=5)

    def requests(self) -> list[dict]:
        return requests.get(f"{self._root}/_requests", timeout=5).json()

    def reset(self) -> None:
        requests.post(f"{self._root}/_reset", timeout=5)


@pytest.fixture(scope="session")
def fake_upstream_process():
    """The fake upstream as a real process on 127.0.0.1, started once per test session."""
    with listening_process("tests.fake_upstream") as port:
        yield FakeUpstream(port)


@pytest.fixture(scope="session")
def second_fake_upstream_process():
    with listening_process("tests.fake_upstream") as port:
        yield FakeUpstream(port)


@pytest.fixture
def second_fake_upstream(second_fake_upstream_process):
    second_fake_upstream_process.reset()
    yield second_fake_upstream_process
    second_fake_upstream_process.reset()


@pytest.fixture
def fake_upstream(fake_upstream_process):
    fake_upstream_process.reset()
    yield fake_upstream_process
    fake_upstream_process.reset()


FAKE_UPSTREAM_KEY_ENV = "IGW_TEST_FAKE_UPSTREAM_KEY"
FAKE_UPSTREAM_KEY = "sk-provider-secret-value"


@pytest.fixture
def fake_upstream_make(fake_upstream, monkeypatch):
    """`fake_upstream_make(name, timeout_seconds=30)` → an `openai` Upstream row in front of the fake
    upstream process, its provider key (FAKE_UPSTREAM_KEY) in the environment variable it names."""
    monkeypatch.setenv(FAKE_UPSTREAM_KEY_ENV, FAKE_UPSTREAM_KEY)

    def make(name: str = "fake-openai", *, timeout_seconds: int = 30):
        return upstream_make(
            name=name,
            base_url=fake_upstream.base_url,
            api_key_env=FAKE_UPSTREAM_KEY_ENV,
            timeout_seconds=timeout_seconds,
        )

    return make
