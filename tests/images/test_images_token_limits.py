"""Image calls do not count against tokens per minute: a group's or a key's `tpm` limits text calls
only (tests/chat/test_text_token_limits.py)."""

from __future__ import annotations

import pytest

from billing.models import LedgerEntry
from groups.services import group_upsert
from keys.services import ApiKeyLimitsInput, api_key_create

pytestmark = pytest.mark.django_db


def test_image_calls_are_not_limited_by_the_groups_or_the_keys_tpm(client, alice, alpha_group, alpha_model):
    group_upsert(
        group_id=alpha_group.pk,
        name=alpha_group.name,
        status="active",
        image_enabled=True,
        billing="balance",
        allow_group_override=True,
        rpm=0,
        concurrency=0,
        tpm=1,
    )
    _, key = api_key_create(account=alice, group=alpha_group, label="t", limits=ApiKeyLimitsInput(tpm=1))

    statuses = [
        client.post(
            "/v1/images/generations",
            {"model": "alpha-image-2", "prompt": "a red square " * 50},
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        ).status_code
        for _ in range(3)
    ]

    assert statuses == [200, 200, 200]
    assert LedgerEntry.objects.filter(kind="charge").count() == 3
