"""Model resolution and upstream lists served from the per-process configuration cache.

A repeated call makes no routing query, and every change to a group, a model, an upstream or a
model's upstream list is seen by the very next call. The cache is on only with REDIS_URL (CI runs
with it); without Redis every call queries, so these tests are skipped.

A write's cache invalidation runs when its transaction commits. Tests here run inside a transaction
that is rolled back, so each write is wrapped in `django_capture_on_commit_callbacks(execute=True)`,
which runs the commit hooks as the commit would; the loadconfig test commits for real.
"""

from __future__ import annotations

import json
import textwrap
from decimal import Decimal

import pytest
from django.conf import settings
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing.models import LedgerEntry, UsageRecord
from core.config_cache import config_cache_enabled
from groups.models import Group
from groups.services import group_upsert
from images.access import model_resolve_for_group
from images.models import ImageModel
from keys.models import ApiKey
from keys.services import api_key_create
from tests.factories import image_model_make
from tests.rate_windows import rate_window_wait
from upstreams.models import Upstream
from upstreams.routing import upstreams_for_model
from upstreams.services import upstream_upsert

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not settings.REDIS_URL,
        reason="the configuration cache is on only with REDIS_URL (a shared generation counter); "
        "without it every call queries the database",
    ),
]

ROUTING_TABLES = ("images_imagemodel", "images_upstream")


@pytest.fixture
def key(alice, alpha_group):
    return api_key_create(account=alice, group=alpha_group, label="routing")[1]


def demo(name: str, **fields) -> Upstream:
    values = {"priority": 0, "weight": 1, "enabled": True, **fields}
    upstream, _ = upstream_upsert(
        name=name, kind="demo", base_url="", api_key_env="", timeout_seconds=60, **values
    )
    return upstream


def generate(client, key, model="alpha-image-2"):
    return client.post(
        "/v1/images/generations",
        data=json.dumps({"model": model, "prompt": "a red square", "size": "64x64"}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def routing_queries(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if any(t in q["sql"] for t in ROUTING_TABLES)]


def charges(alice) -> list[Decimal]:
    return list(
        LedgerEntry.objects.filter(wallet__account=alice, kind=LedgerEntry.Kind.CHARGE)
        .order_by("pk")
        .values_list("amount", flat=True)
    )


def test_the_cache_is_on_in_this_configuration():
    assert config_cache_enabled()


def test_it_makes_no_routing_query_for_the_second_call_of_a_model(client, alice, key, alpha_model):
    with CaptureQueriesContext(connection) as first:
        assert generate(client, key).status_code == 200
    with CaptureQueriesContext(connection) as second:
        response = generate(client, key)

    assert response.status_code == 200
    assert len(response.json()["data"]) == 1
    assert len(routing_queries(first)) == 2  # the group's models, the model's upstreams
    assert routing_queries(second) == []
    assert charges(alice) == [Decimal("-0.1500")] * 2
    assert UsageRecord.objects.filter(status=200, upstream="demo").count() == 2


def test_the_selectors_answer_from_the_cache_without_a_query(
    alpha_group, alpha_model, django_assert_num_queries
):
    resolved = model_resolve_for_group(group=alpha_group, model_name="alpha-image-2")
    upstreams = upstreams_for_model(model_label="images.ImageModel", model_pk=resolved.pk)

    with django_assert_num_queries(0):
        assert model_resolve_for_group(group=alpha_group, model_name="alpha-image-2") is resolved
        assert upstreams_for_model(model_label="images.ImageModel", model_pk=resolved.pk) == upstreams
    assert [u.name for u in upstreams] == ["demo"]


def test_the_cached_model_is_read_only_for_its_capability_lists(alpha_group, alpha_model):
    resolved = model_resolve_for_group(group=alpha_group, model_name="alpha-image-2")

    assert resolved.sizes == ("1024x1024", "1024x1536", "64x64", "auto")
    with pytest.raises(AttributeError):
        resolved.sizes.append("4096x4096")  # shared by every thread: a mutation must fail loudly


def test_it_draws_the_weighted_order_per_call_from_the_cached_list(alpha_group, django_assert_num_queries):
    heavy, light = demo("heavy", weight=3), demo("light", weight=1)
    backup = demo("backup", priority=1, weight=50)
    model = image_model_make(model_id="weighted", group=alpha_group, upstreams=[light, heavy, backup])
    upstreams_for_model(model_label="images.ImageModel", model_pk=model.pk)

    with django_assert_num_queries(0):
        orders = [
            tuple(u.name for u in upstreams_for_model(model_label="images.ImageModel", model_pk=model.pk))
            for _ in range(2000)
        ]

    assert set(orders) == {("heavy", "light", "backup"), ("light", "heavy", "backup")}
    share = sum(order[0] == "heavy" for order in orders) / len(orders)
    assert 0.70 < share < 0.80  # 3:1 -> 75 %


def test_a_price_change_is_charged_on_the_next_call(
    client, alice, key, alpha_group, alpha_model, demo_upstream, django_capture_on_commit_callbacks
):
    assert generate(client, key).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        image_model_make(
            model_id="alpha-image-2",
            group=alpha_group,
            upstreams=[demo_upstream],
            price="0.40",
            sizes=["64x64"],
        )

    assert generate(client, key).status_code == 200
    assert charges(alice) == [Decimal("-0.1500"), Decimal("-0.4000")]


def test_a_disabled_model_is_refused_on_the_next_call(
    client, alice, key, alpha_model, django_capture_on_commit_callbacks
):
    assert generate(client, key).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        alpha_model.enabled = False
        alpha_model.save(update_fields=["enabled", "updated_at"])

    response = generate(client, key)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert charges(alice) == [Decimal("-0.1500")]


def test_a_deleted_model_is_refused_on_the_next_call(
    client, alice, key, alpha_model, django_capture_on_commit_callbacks
):
    assert generate(client, key).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        ImageModel.objects.filter(pk=alpha_model.pk).delete()

    response = generate(client, key)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert not ImageModel.objects.exists()


def test_a_new_upstream_list_routes_the_next_call(
    client, alice, key, alpha_model, django_capture_on_commit_callbacks
):
    assert generate(client, key).status_code == 200
    other = demo("demo-2")
    with django_capture_on_commit_callbacks(execute=True):
        alpha_model.upstreams.set([other])

    assert generate(client, key).status_code == 200
    assert list(UsageRecord.objects.order_by("pk").values_list("upstream", flat=True)) == ["demo", "demo-2"]


def test_a_disabled_upstream_is_skipped_on_the_next_call(
    client, alice, key, alpha_model, demo_upstream, django_capture_on_commit_callbacks
):
    assert generate(client, key).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        demo_upstream.enabled = False
        demo_upstream.save(update_fields=["enabled", "updated_at"])

    response = generate(client, key)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_upstream_available"
    assert charges(alice) == [Decimal("-0.1500")]  # the refused call is not charged


def test_a_disabled_group_is_refused_on_the_next_call(
    client, alice, key, alpha_group, alpha_model, django_capture_on_commit_callbacks
):
    assert generate(client, key).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        alpha_group.status = Group.Status.DISABLED
        alpha_group.save(update_fields=["status", "updated_at"])

    response = generate(client, key)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "GROUP_DISABLED"
    assert charges(alice) == [Decimal("-0.1500")]


def test_a_new_rpm_applies_from_the_next_call(
    client, alice, key, alpha_group, alpha_model, django_capture_on_commit_callbacks
):
    cache.clear()  # per-minute counts of an earlier run's key with the same id must not count here
    assert generate(client, key).status_code == 200  # rpm 0: unlimited, nothing counted
    with django_capture_on_commit_callbacks(execute=True):
        group_upsert(
            group_id=alpha_group.pk,
            name=alpha_group.name,
            status="active",
            image_enabled=True,
            billing="balance",
            allow_group_override=True,
            rpm=1,
            concurrency=0,
        )

    rate_window_wait(f"api_key:{ApiKey.objects.get().pk}")
    assert generate(client, key).status_code == 200
    refused = generate(client, key)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert charges(alice) == [Decimal("-0.1500")] * 2


def test_a_model_added_in_the_admin_is_listed_and_served_at_once(
    client,
    staff_client,
    alice,
    key,
    alpha_group,
    alpha_model,
    demo_upstream,
    django_capture_on_commit_callbacks,
):
    listed = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert [m["id"] for m in listed.json()["data"]] == ["alpha-image-2"]
    assert generate(client, key, model="alpha-image-3").status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(
            reverse("admin:images_imagemodel_add"),
            {
                "model_id": "alpha-image-3",
                "group": alpha_group.pk,
                "price": "0.25",
                "upstream_model": "",
                "upstreams": [demo_upstream.pk],
                "sizes": "64x64",
                "qualities": "",
                "styles": "",
                "backgrounds": "",
                "output_formats": "png",
                "output_compression_min": "",
                "output_compression_max": "",
                "max_n": 1,
                "default_response_format": "b64_json",
                "enabled": "on",
            },
        )
    assert response.status_code == 302, response.content

    listed = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert [m["id"] for m in listed.json()["data"]] == ["alpha-image-2", "alpha-image-3"]
    assert generate(client, key, model="alpha-image-3").status_code == 200
    assert charges(alice) == [Decimal("-0.2500")]


@pytest.mark.django_db(transaction=True)
def test_loadconfig_changes_are_seen_by_the_next_call(client, alice, key, alpha_model, tmp_path):
    assert generate(client, key).status_code == 200
    config = tmp_path / "gateway.toml"
    config.write_text(
        textwrap.dedent(
            """
            [[upstreams]]
            name = "demo"
            kind = "demo"
            timeout_seconds = 60

            [[groups]]
            id = 1
            name = "Alpha-Image"
            image_enabled = true
            allow_group_override = true

            [[models]]
            id = "alpha-image-2"
            group = "Alpha-Image"
            price = "0.05"
            upstreams = ["demo"]
            sizes = ["64x64"]
            output_formats = ["png"]
            """
        )
    )

    call_command("loadconfig", str(config))  # commits its transaction, as in production

    assert generate(client, key).status_code == 200
    assert charges(alice) == [Decimal("-0.1500"), Decimal("-0.0500")]
    assert Group.objects.get(pk=1).status == "active"
