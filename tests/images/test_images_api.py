"""The image endpoints over HTTP: the official openai SDK against a live server, the Django client for
the refusal matrix, and a real fake-upstream process for the upstream's failure classes. Every
refusal asserts the answer and that nothing was reserved, charged or sent upstream."""

from __future__ import annotations

import base64
import io
import json
from decimal import Decimal

import openai
import pytest
import requests
from django.core.cache import cache
from PIL import Image

from billing.models import Hold, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.subscriptions import subscription_upsert
from groups.services import group_upsert
from keys.models import ApiKey
from keys.services import api_key_create
from tests.conftest import FAKE_UPSTREAM_KEY, FAKE_UPSTREAM_KEY_ENV
from tests.factories import image_model_make, upstream_make
from tests.rate_windows import rate_window_wait


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()  # rate counters and circuit state from other tests
    yield
    cache.clear()


@pytest.fixture
def fast_retries(settings):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.01, "max_wait": 0.05}


def png_bytes(size=(64, 64), mode="RGB", colour=(200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, colour).save(buffer, "PNG")
    return buffer.getvalue()


def jpeg_bytes(size=(64, 64)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 200, 10)).save(buffer, "JPEG")
    return buffer.getvalue()


def model_upsert(*, model_id, group, upstreams, price="0.15", **overrides):
    """A model with the capabilities these tests exercise (sizes, formats, compression, n up to 4)."""
    values = {
        "sizes": ["1024x1024", "1024x1536", "64x64", "auto"],
        "qualities": ["low", "high"],
        "backgrounds": ["transparent", "opaque"],
        "output_formats": ["png", "jpeg", "webp"],
        "output_compression": (0, 100),
        "max_n": 4,
        "edits_supported": True,
        **overrides,
    }
    return image_model_make(model_id=model_id, group=group, upstreams=upstreams, price=price, **values)


@pytest.fixture
def openai_upstream(fake_upstream_make):
    return fake_upstream_make("fake-openai", timeout_seconds=2)


@pytest.fixture
def fake_model(alpha_group, openai_upstream):
    return model_upsert(
        model_id="alpha-fake", group=alpha_group, upstreams=[openai_upstream], upstream_model="vendor-image-1"
    )


@pytest.fixture
def alice_key(alice, alpha_group):
    return api_key_create(account=alice, group=alpha_group, label="tests")[1]


def post_json(client, key, body, **headers):
    return client.post(
        "/v1/images/generations",
        data=json.dumps(body) if not isinstance(body, bytes | str) else body,
        content_type=headers.pop("content_type", "application/json"),
        headers={"Authorization": f"Bearer {key}", **headers},
    )


def assert_nothing_billed(account, *, ledger_entries=1):
    wallet = Wallet.objects.get(account=account)
    assert wallet.balance == Decimal("10")
    assert wallet.held == Decimal("0")
    assert LedgerEntry.objects.filter(wallet=wallet).count() == ledger_entries  # the opening top-up only
    assert not Hold.objects.filter(status="open").exists()


def decode(b64: str) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(b64)))
    image.load()
    return image


# --- the official SDK against a live server ----------------------------------------------------


@pytest.fixture
def sdk(live_server, alice_key):
    return openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=alice_key, max_retries=0)


@pytest.mark.django_db(transaction=True)
def test_the_sdk_generates_base64_images_and_the_call_is_charged_once(sdk, alice, alpha_model):
    result = sdk.images.generate(
        model="alpha-image-2", prompt="a lighthouse", n=2, size="1024x1536", response_format="b64_json"
    )
    assert len(result.data) == 2
    for item in result.data:
        assert decode(item.b64_json).size == (1024, 1536)
        assert item.revised_prompt == "a lighthouse"
    wallet = Wallet.objects.get(account=alice)
    assert wallet.balance == Decimal("9.85")
    charges = LedgerEntry.objects.filter(wallet=wallet, kind="charge")
    assert [c.amount for c in charges] == [Decimal("-0.15")]
    record = UsageRecord.objects.get()
    assert (record.status, record.amount, record.model_id, record.endpoint) == (
        200,
        Decimal("0.15"),
        "alpha-image-2",
        "images.generations",
    )
    assert charges[0].reference == record.request_id


@pytest.mark.django_db(transaction=True)
def test_the_sdk_gets_signed_urls_that_serve_the_image_without_a_key(sdk, live_server, settings, alpha_model):
    settings.GATEWAY_PUBLIC_URL = live_server.url
    result = sdk.images.generate(
        model="alpha-image-2",
        prompt="x",
        size="64x64",
        response_format="url",
        extra_body={"output_format": "webp"},
    )
    url = result.data[0].url
    assert url.startswith(f"{live_server.url}/files/images/")
    fetched = requests.get(url, timeout=10)
    assert fetched.status_code == 200
    assert fetched.headers["Content-Type"] == "image/webp"
    assert Image.open(io.BytesIO(fetched.content)).format == "WEBP"


@pytest.mark.django_db(transaction=True)
def test_the_sdk_edits_an_image_with_a_mask(sdk, alice, alpha_model):
    mask = Image.new("RGBA", (64, 64), (0, 0, 0, 255))
    mask.paste((0, 0, 0, 0), (0, 0, 32, 64))
    buffer = io.BytesIO()
    mask.save(buffer, "PNG")
    result = sdk.images.edit(
        model="alpha-image-2",
        image=("source.png", png_bytes(), "image/png"),
        mask=("mask.png", buffer.getvalue(), "image/png"),
        prompt="paint it blue",
        n=1,
    )
    edited = decode(result.data[0].b64_json)
    assert edited.size == (64, 64)
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
    assert UsageRecord.objects.get().endpoint == "images.edits"


@pytest.mark.django_db(transaction=True)
def test_the_sdk_raises_its_own_exception_classes(
    live_server, sdk, alice, alice_key, alpha_model, beta_group, demo_upstream, alpha_group
):
    model_upsert(model_id="beta-only", group=beta_group, upstreams=[demo_upstream], price="0.02")
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.images.generate(model="alpha-image-2", prompt="x", n=0)
    assert bad.value.body["param"] == "n"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{live_server.url}/v1", api_key="sk-wrong", max_retries=0).images.generate(
            model="alpha-image-2", prompt="x"
        )
    with pytest.raises(openai.PermissionDeniedError) as denied:
        sdk.images.generate(model="beta-only", prompt="x")
    assert denied.value.body["code"] == "model_not_allowed"
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.images.generate(model="no-such-model", prompt="x")
    assert missing.value.body["code"] == "model_not_found"
    group_upsert(
        group_id=alpha_group.id,
        name=alpha_group.name,
        status="active",
        image_enabled=True,
        billing="balance",
        allow_group_override=True,
        rpm=1,
        concurrency=0,
    )
    rate_window_wait(f"api_key:{ApiKey.objects.get().pk}")
    sdk.images.generate(model="alpha-image-2", prompt="x", size="64x64")
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.images.generate(model="alpha-image-2", prompt="x", size="64x64")
    assert int(limited.value.response.headers["Retry-After"]) >= 1
    # Only the one successful call was charged.
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


# --- refusals: status, type, param; nothing reserved, charged or sent upstream -----------------


BAD_BODIES = [
    ({"prompt": "x"}, "model"),
    ({"model": "alpha-fake"}, "prompt"),
    ({"model": "alpha-fake", "prompt": ""}, "prompt"),
    ({"model": "alpha-fake", "prompt": "x" * 32001}, "prompt"),
    ({"model": "alpha-fake", "prompt": "x", "n": "2"}, "n"),
    ({"model": "alpha-fake", "prompt": "x", "n": 2.5}, "n"),
    ({"model": "alpha-fake", "prompt": "x", "n": 0}, "n"),
    ({"model": "alpha-fake", "prompt": "x", "n": -1}, "n"),
    ({"model": "alpha-fake", "prompt": "x", "n": True}, "n"),
    ({"model": "alpha-fake", "prompt": "x", "n": 5}, "n"),
    ({"model": "alpha-fake", "prompt": "x", "size": "1024"}, "size"),
    ({"model": "alpha-fake", "prompt": "x", "size": "512x512"}, "size"),
    ({"model": "alpha-fake", "prompt": "x", "quality": "ultra"}, "quality"),
    ({"model": "alpha-fake", "prompt": "x", "style": "vivid"}, "style"),
    ({"model": "alpha-fake", "prompt": "x", "background": "plaid"}, "background"),
    ({"model": "alpha-fake", "prompt": "x", "output_format": "gif"}, "output_format"),
    (
        {"model": "alpha-fake", "prompt": "x", "output_format": "jpeg", "output_compression": 101},
        "output_compression",
    ),
    (
        {"model": "alpha-fake", "prompt": "x", "output_format": "png", "output_compression": 50},
        "output_compression",
    ),
    ({"model": "alpha-fake", "prompt": "x", "response_format": "png"}, "response_format"),
    ({"model": "alpha-fake", "prompt": "x", "user": "u" * 257}, "user"),
    ({"model": "alpha-fake", "prompt": "x", "partial_images": 2}, "partial_images"),
    ({"model": "alpha-fake", "prompt": "x", "stream": True}, "stream"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "param"), BAD_BODIES, ids=[f"{p}-{i}" for i, (_, p) in enumerate(BAD_BODIES)]
)
def test_it_refuses_invalid_fields_before_reserving_or_calling_upstream(
    client, alice, alice_key, fake_model, fake_upstream, body, param
):
    response = post_json(client, alice_key, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert param in error["message"] or param == "model"
    assert_nothing_billed(alice)
    assert fake_upstream.requests() == []
    assert UsageRecord.objects.get().status == 400


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "content_type", "status", "code"),
    [
        (b'{"model": "alpha-fake", "prompt": ', "application/json", 400, "invalid_json"),
        (b'["alpha-fake"]', "application/json", 400, None),
        (b"model=alpha-fake&prompt=x", "application/x-www-form-urlencoded", 415, "unsupported_content_type"),
        (
            json.dumps({"model": "alpha-fake", "prompt": "x" * 2_000_000}).encode(),
            "application/json",
            413,
            None,
        ),
    ],
    ids=["malformed-json", "not-an-object", "wrong-content-type", "too-large"],
)
def test_it_refuses_bodies_it_cannot_read(
    client, alice, alice_key, fake_model, fake_upstream, payload, content_type, status, code
):
    response = post_json(client, alice_key, payload, content_type=content_type)
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    if code:
        assert response.json()["error"]["code"] == code
    assert_nothing_billed(alice)
    assert fake_upstream.requests() == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "content_type", "accepted"),
    [
        ("/v1/images/edits", "application/json", "multipart/form-data or application/x-www-form-urlencoded"),
        ("/v1/images/generations", "text/plain", "application/json"),
        ("/v1/images/generations", "", "application/json"),
    ],
)
def test_a_body_in_a_media_type_the_endpoint_does_not_read_is_415_with_one_clear_message(
    client, alice, alice_key, fake_model, fake_upstream, path, content_type, accepted
):
    response = client.post(
        path,
        data=json.dumps({"model": "alpha-fake", "prompt": "x"}),
        content_type=content_type,
        headers={"Authorization": f"Bearer {alice_key}"},
    )

    assert response.status_code == 415
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "unsupported_content_type")
    assert error["message"].startswith(
        f'Content-Type "{content_type}" is not accepted here: send {accepted}. (request id: '
        if content_type
        else f"The request has no Content-Type: send {accepted}. (request id: "
    )
    assert_nothing_billed(alice)
    assert fake_upstream.requests() == []


@pytest.mark.django_db
def test_it_forwards_only_the_spec_fields_under_the_upstream_model_name(
    client, alice_key, fake_model, fake_upstream
):
    response = post_json(
        client,
        alice_key,
        {
            "model": "alpha-fake",
            "prompt": "a cat",
            "n": 2,
            "size": "1024x1024",
            "quality": "high",
            "output_format": "jpeg",
            "output_compression": 80,
            "user": "end-user-7",
            "temperature": 2,
            "seed": 42,
            "metadata": {"x": 1},
        },
    )
    assert response.status_code == 200, response.content
    sent = fake_upstream.requests()[0]
    assert sent["json"]["model"] == "vendor-image-1"
    assert set(sent["json"]) <= {
        "model",
        "prompt",
        "n",
        "size",
        "quality",
        "response_format",
        "user",
        "style",
        "background",
        "output_format",
        "output_compression",
        "moderation",
        "input_fidelity",
        "partial_images",
    }
    assert {"temperature", "seed", "metadata"}.isdisjoint(sent["json"])
    assert sent["headers"]["Authorization"] == f"Bearer {FAKE_UPSTREAM_KEY}"
    assert len(response.json()["data"]) == 2


# --- uploads over HTTP ---------------------------------------------------------------------------


def post_edit(client, key, files, headers=None, **fields):
    data = {"model": "alpha-image-2", "prompt": "edit it", **fields}
    for name, (filename, content) in files.items():
        upload = io.BytesIO(content)
        upload.name = filename  # the test client declares the type from the name: *.png -> image/png
        data[name] = upload
    return client.post(
        "/v1/images/edits", data=data, headers={"Authorization": f"Bearer {key}", **(headers or {})}
    )


@pytest.mark.django_db
def test_an_edits_key_tells_a_prompt_holding_a_field_from_that_field(client, alice, alice_key, alpha_model):
    keyed = {"Idempotency-Key": "edit-1"}
    image = {"image": ("a.png", png_bytes())}

    first = post_edit(client, alice_key, image, headers=keyed, prompt="edit it\nsize=64x64")
    replay = post_edit(client, alice_key, image, headers=keyed, prompt="edit it\nsize=64x64")
    other = post_edit(client, alice_key, image, headers=keyed, prompt="edit it", size="64x64")
    other_image = post_edit(
        client,
        alice_key,
        {"image": ("a.png", png_bytes(colour=(1, 2, 3)))},
        headers=keyed,
        prompt="edit it\nsize=64x64",
    )

    assert first.status_code == 200, first.content
    assert (replay.status_code, replay["Idempotent-Replayed"]) == (200, "true")
    assert replay.content == first.content
    for refused in (other, other_image):
        assert refused.status_code == 422, refused.content
        assert refused.json()["error"]["code"] == "idempotency_key_reused"
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


@pytest.mark.django_db
def test_an_edit_uploaded_to_temporary_files_is_told_apart_and_replayed_for_its_key(
    client, alice, alice_key, alpha_model, settings
):
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 100  # every upload is written to a temporary file
    keyed = {"Idempotency-Key": "edit-on-disk"}
    image, mask = png_bytes(), png_bytes(mode="RGBA", colour=(0, 0, 0, 0))
    files = {"image": ("a.png", image), "mask": ("m.png", mask)}

    first = post_edit(client, alice_key, files, headers=keyed)
    replay = post_edit(client, alice_key, files, headers=keyed)
    swapped = post_edit(
        client, alice_key, {"image": ("a.png", mask), "mask": ("m.png", image)}, headers=keyed
    )

    assert first.status_code == 200, first.content
    assert (replay.status_code, replay["Idempotent-Replayed"], replay.content) == (200, "true", first.content)
    assert swapped.status_code == 422, swapped.content
    assert swapped.json()["error"]["code"] == "idempotency_key_reused"
    assert LedgerEntry.objects.filter(kind="charge").count() == 1


@pytest.mark.django_db
def test_an_edit_decides_the_format_by_the_bytes_not_the_name(client, alice, alice_key, alpha_model):
    response = post_edit(client, alice_key, {"image": ("photo.png", jpeg_bytes())})
    assert response.status_code == 200, response.content
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("files", "status", "param"),
    [
        ({"image": ("archive.png", b"PK\x03\x04" + b"\x00" * 200)}, 400, "image"),
        ({"image": ("a.png", png_bytes()[:60])}, 400, "image"),
        (
            {
                "image": ("a.png", png_bytes((64, 64))),
                "mask": ("m.png", png_bytes((32, 32), "RGBA", (0, 0, 0, 0))),
            },
            400,
            "mask",
        ),
        ({"image": ("a.png", png_bytes()), "mask": ("m.png", png_bytes((64, 64), "RGB"))}, 400, "mask"),
    ],
    ids=["zip-renamed", "truncated", "mask-size", "mask-without-alpha"],
)
def test_it_refuses_bad_uploads_without_charging(client, alice, alice_key, alpha_model, files, status, param):
    response = post_edit(client, alice_key, files)
    assert response.status_code == status, response.content
    assert response.json()["error"]["param"] == param
    assert_nothing_billed(alice)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height, with no pixel data: a decompression bomb's shape."""
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    end = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    return b"\x89PNG\r\n\x1a\n" + chunk + end


@pytest.mark.django_db
def test_it_refuses_an_image_declaring_30000_by_30000_pixels(client, alice, alice_key, alpha_model):
    response = post_edit(client, alice_key, {"image": ("bomb.png", png_header_only(30000, 30000))})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "image"
    assert "pixels" in error["message"]
    assert_nothing_billed(alice)


@pytest.mark.django_db
def test_it_refuses_a_30_mb_upload_with_413(client, alice, alice_key, alpha_model):
    big = png_bytes() + b"\x00" * (30 * 1024 * 1024)
    response = post_edit(client, alice_key, {"image": ("big.png", big)})
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert_nothing_billed(alice)


# --- upstream failure classes against a real HTTP upstream process ------------------------------

GEN = "/v1/images/generations"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("answers", "status", "code"),
    [
        (
            [{"status": 401, "json": {"error": {"message": "Incorrect API key provided: sk-prov***"}}}],
            502,
            "upstream_auth_failed",
        ),
        ([{"status": 200, "body": "<html>gateway page</html>", "content_type": "text/html"}] * 6, 502, None),
        (
            [
                {
                    "status": 400,
                    "json": {
                        "error": {
                            "message": "Your prompt was rejected.",
                            "type": "invalid_request_error",
                            "param": "prompt",
                            "code": "moderation",
                        }
                    },
                }
            ],
            400,
            "moderation",
        ),
    ],
    ids=["upstream-401", "html-body", "upstream-400-passthrough"],
)
def test_upstream_failures_map_to_clear_errors_and_are_never_charged(
    client, alice, alice_key, fake_model, fake_upstream, fast_retries, answers, status, code
):
    fake_upstream.script(GEN, *answers)
    response = post_json(client, alice_key, {"model": "alpha-fake", "prompt": "x"})
    assert response.status_code == status, response.content
    body = response.json()
    if code:
        assert body["error"]["code"] == code
    assert FAKE_UPSTREAM_KEY not in response.content.decode()
    assert "127.0.0.1" not in body["error"]["message"]
    assert_nothing_billed(alice)
    record = UsageRecord.objects.get()
    assert (record.status, record.amount, record.upstream) == (status, Decimal("0"), "fake-openai")
    if code:  # the usage record says why: the gateway's code, or a passed-through upstream's own
        assert record.error_code == code


@pytest.mark.django_db
def test_a_flaky_upstream_is_retried_and_the_call_charged_once(
    client, alice, alice_key, fake_model, fake_upstream, fast_retries
):
    fake_upstream.script(
        GEN,
        {"status": 500, "json": {"error": {"message": "boom"}}},
        {"status": 502, "body": "bad gateway", "content_type": "text/plain"},
    )
    response = post_json(client, alice_key, {"model": "alpha-fake", "prompt": "x"})
    assert response.status_code == 200, response.content
    assert len(fake_upstream.requests()) == 3
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


@pytest.mark.django_db
def test_an_upstream_failing_forever_ends_502_after_the_configured_attempts(
    client, alice, alice_key, fake_model, fake_upstream, fast_retries, settings
):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "circuit_threshold": 100}
    fake_upstream.script(GEN, *[{"status": 500, "json": {"error": {"message": "down"}}}] * 10)
    response = post_json(client, alice_key, {"model": "alpha-fake", "prompt": "x"})
    assert response.status_code == 502
    assert "repeatedly failed" in response.json()["error"]["message"]
    assert "500" in response.json()["error"]["message"]
    assert len(fake_upstream.requests()) == 6  # the first attempt and 5 retries
    assert_nothing_billed(alice)


@pytest.mark.django_db
def test_a_read_timeout_ends_504_without_a_retry_or_a_charge(
    client, alice, alice_key, fake_model, fake_upstream, openai_upstream, fast_retries
):
    fake_upstream.script(GEN, {"action": "hang", "seconds": 4})
    response = post_json(client, alice_key, {"model": "alpha-fake", "prompt": "x"})
    assert response.status_code == 504
    assert len(fake_upstream.requests()) == 1
    assert_nothing_billed(alice)


@pytest.mark.django_db
def test_connection_refused_moves_on_to_the_next_upstream(
    client, alice, alice_key, alpha_group, openai_upstream, fake_upstream, fast_retries
):
    dead = upstream_make(
        name="dead",
        base_url="http://127.0.0.1:9/v1",
        api_key_env=FAKE_UPSTREAM_KEY_ENV,
        timeout_seconds=2,
    )
    openai_upstream.priority = 1
    openai_upstream.save(update_fields=["priority"])
    model_upsert(model_id="alpha-fake", group=alpha_group, upstreams=[dead, openai_upstream])
    response = post_json(client, alice_key, {"model": "alpha-fake", "prompt": "x"})
    assert response.status_code == 200, response.content
    assert UsageRecord.objects.get().upstream == "fake-openai"
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


@pytest.mark.django_db
def test_a_subscription_group_call_counts_against_the_subscription_not_the_wallet(
    client, alice, beta_group, demo_upstream
):
    from django.utils import timezone

    from accounts.services import account_set_groups

    account_set_groups(
        account=alice, allowed_groups=[alice.current_group, beta_group], current_group=alice.current_group
    )
    model_upsert(model_id="beta-imagine-image", group=beta_group, upstreams=[demo_upstream], price="0.02")
    subscription, _ = subscription_upsert(
        account=alice,
        group=beta_group,
        daily_limit=Decimal("1"),
        weekly_limit=None,
        monthly_limit=None,
        total_limit=Decimal("10"),
        starts_at=timezone.now() - timezone.timedelta(days=1),
        expires_at=None,
    )
    key = api_key_create(account=alice, group=beta_group)[1]
    response = post_json(client, key, {"model": "beta-imagine-image", "prompt": "x", "size": "64x64"})
    assert response.status_code == 200, response.content
    assert Wallet.objects.get(account=alice).balance == Decimal("10")
    used = {u.window: u.used for u in SubscriptionUsage.objects.filter(subscription=subscription)}
    assert used["day"] == Decimal("0.02")
    assert used["total"] == Decimal("0.02")
    record = UsageRecord.objects.get()
    assert (record.status, record.billing) == (200, "subscription")
