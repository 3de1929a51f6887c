"""An edit is refused by every cheap check (credential, group, model, limits, balance) before any
uploaded image is read or decoded, and decoding runs off a gevent worker's event loop."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from PIL import Image

from billing.models import Hold
from groups.services import group_upsert
from keys.services import api_key_create
from tests.images.conftest import image_bytes
from tests.rate_windows import rate_window_wait

pytestmark = pytest.mark.django_db

EDITS = "/v1/images/edits"
# Starts like a PNG, so only decoding it (Pillow) would find out that it is not one.
UNDECODABLE_PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture
def pillow_opened(monkeypatch):
    """Records every Image.open; the checks must not reach it on a refused call."""
    calls = []
    real_open = Image.open

    def counted_open(*args, **kwargs):
        calls.append(args)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(Image, "open", counted_open)
    return calls


def _edit(client, key: str, *, model: str = "alpha-image-2", images: int = 4):
    parts = {
        "model": model,
        "prompt": "make it blue",
        "image[]": [SimpleUploadedFile(f"i{n}.png", UNDECODABLE_PNG, "image/png") for n in range(images)],
    }
    return client.post(EDITS, parts, headers={"Authorization": f"Bearer {key}"})


def test_a_key_with_no_balance_is_refused_403_before_any_image_is_decoded(
    client, bob, alpha_model, pillow_opened
):
    key = api_key_create(account=bob, group=alpha_model.group, label="empty wallet")[1]

    response = _edit(client, key)

    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "INSUFFICIENT_BALANCE"
    assert pillow_opened == []
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()


def test_a_key_over_its_rate_limit_is_refused_429_before_any_image_is_decoded(
    client, alice, alpha_model, pillow_opened
):
    cache.clear()  # key ids repeat from test to test: no earlier test's count may remain
    group = alpha_model.group
    group_upsert(
        group_id=group.id,
        name=group.name,
        status="active",
        image_enabled=True,
        billing="balance",
        allow_group_override=True,
        rpm=1,
        concurrency=0,
    )
    api_key, key = api_key_create(account=alice, group=group, label="t")
    rate_window_wait(f"api_key:{api_key.pk}")
    assert _edit(client, key).status_code == 400  # the first call is counted, then its image refused
    pillow_opened.clear()

    response = _edit(client, key)

    assert response.status_code == 429
    assert pillow_opened == []


def test_an_unknown_model_is_refused_before_any_image_is_decoded(client, alice, alpha_model, pillow_opened):
    key = api_key_create(account=alice, group=alpha_model.group, label="t")[1]

    assert _edit(client, key, model="no-such-model").status_code == 404
    assert pillow_opened == []


def test_a_funded_edit_with_an_undecodable_image_is_refused_400_and_nothing_stays_held(
    client, alice, alpha_model
):
    key = api_key_create(account=alice, group=alpha_model.group, label="t")[1]

    response = _edit(client, key, images=1)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_image"
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    alice.wallet.refresh_from_db()
    assert alice.wallet.held == 0


def test_a_funded_edit_still_succeeds(client, alice, alpha_model):
    key = api_key_create(account=alice, group=alpha_model.group, label="t")[1]
    parts = {"model": "alpha-image-2", "prompt": "blue", "image": SimpleUploadedFile("i.png", image_bytes())}

    response = client.post(EDITS, parts, headers={"Authorization": f"Bearer {key}"})

    assert response.status_code == 200, response.content
