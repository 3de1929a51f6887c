"""Hosted images (signed, expiring links; purge) and image_fetch (the upstream's host only, capped)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import requests
from django.core.files.storage import default_storage
from django.core.management import call_command
from django.utils import timezone

from api.upstream_errors import upstream_error_to_api_error
from images.hosting import (
    hosted_image_path,
    hosted_image_public_id,
    hosted_image_store,
    hosted_image_url,
    image_fetch,
)
from images.models import HostedImage
from tests.factories import upstream_make
from tests.images.conftest import OPENAI_KEY_ENV, RawUpstream, image_bytes
from upstreams.providers.base import UpstreamError

pytestmark = pytest.mark.django_db

IMAGE_URL = "https://api.provider.test/files/img-1.png"


def path_of(url: str) -> str:
    return urlsplit(url).path


def test_a_stored_image_is_served_by_its_signed_url_without_an_api_key(client, settings):
    data = image_bytes("WEBP")
    url = hosted_image_store(data=data, content_type="image/webp")
    assert url.startswith(f"{settings.GATEWAY_PUBLIC_URL}/files/images/")
    response = client.get(path_of(url))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == data
    assert response["Content-Type"] == "image/webp"
    assert response["Cache-Control"].startswith("private, max-age=")
    assert 3590 <= int(response["Cache-Control"].rsplit("=", 1)[1]) <= 3600
    assert response["X-Content-Type-Options"] == "nosniff"


def test_a_hosted_images_link_names_it_after_expiry_too_and_no_other_url_does(client, settings):
    url = hosted_image_store(data=image_bytes(), content_type="image/png")
    image = HostedImage.objects.get()
    expired = hosted_image_url(public_id=image.public_id, ttl_seconds=-1)

    assert hosted_image_public_id(url=url) == hosted_image_public_id(url=expired) == image.public_id
    assert client.get(path_of(expired)).status_code == 403  # expired as a link, still a reference
    fresh = hosted_image_path(public_id=image.public_id)
    assert fresh.startswith("/files/images/") and client.get(fresh).status_code == 200
    token = url.rsplit("/", 1)[1]
    assert hosted_image_public_id(url=url.replace(token, "x" + token)) is None  # signature broken
    assert hosted_image_public_id(url=IMAGE_URL) is None  # an upstream's own link
    assert hosted_image_public_id(url=f"https://elsewhere.test/files/images/{token}") is None


def test_the_public_url_keeps_a_path_prefix(settings):
    settings.GATEWAY_PUBLIC_URL = "https://gateway.example.com/igw"
    url = hosted_image_store(data=image_bytes(), content_type="image/png")
    assert url.startswith("https://gateway.example.com/igw/files/images/")


def test_the_stored_name_reveals_nothing_and_the_record_is_kept(settings):
    data = image_bytes()
    hosted_image_store(data=data, content_type="image/png")
    image = HostedImage.objects.get()
    assert (image.content_type, image.size_bytes) == ("image/png", len(data))
    assert image.storage_name.startswith("hosted-images/") and image.storage_name.endswith(".png")
    assert default_storage.open(image.storage_name).read() == data


def test_it_refuses_to_host_other_content_types():
    with pytest.raises(ValueError, match="text/html"):
        hosted_image_store(data=b"<html>", content_type="text/html")


@pytest.mark.parametrize("tamper", ["signature", "id", "expiry"])
def test_a_tampered_signed_url_is_403(client, tamper):
    path = path_of(hosted_image_store(data=image_bytes(), content_type="image/png"))
    token = path.rsplit("/", 1)[1]
    value, signature = token.rsplit(":", 1)
    public_hex, expires = value.split(".")
    if tamper == "signature":
        token = f"{value}:{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}"
    elif tamper == "id":
        token = f"{'0' * 32}.{expires}:{signature}"
    else:
        token = f"{public_hex}.{int(expires) + 86400}:{signature}"
    response = client.get(path.rsplit("/", 1)[0] + "/" + token)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "invalid_signature"
    assert response["Content-Type"] == "application/json"


def test_an_expired_signed_url_is_403(client, settings):
    settings.GATEWAY_IMAGE_URL_TTL_SECONDS = -1
    path = path_of(hosted_image_store(data=image_bytes(), content_type="image/png"))
    response = client.get(path)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "expired_url"


def test_a_url_signed_with_another_secret_is_403(client, settings):
    path = path_of(hosted_image_store(data=image_bytes(), content_type="image/png"))
    settings.SECRET_KEY = "another-secret-key-entirely"
    assert client.get(path).status_code == 403


def test_a_purged_image_is_404(client):
    path = path_of(hosted_image_store(data=image_bytes(), content_type="image/png"))
    call_command("purge_images", "--older-than-hours", "0")
    response = client.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "image_not_found"


def test_only_get_and_head_are_allowed(client):
    path = path_of(hosted_image_store(data=image_bytes(), content_type="image/png"))
    assert client.head(path).status_code == 200
    response = client.post(path)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


def test_purge_images_deletes_only_images_older_than_the_retention(settings, capsys):
    settings.GATEWAY_IMAGE_RETENTION_HOURS = 24
    for _ in range(3):
        hosted_image_store(data=image_bytes(), content_type="image/png")
    old = list(HostedImage.objects.order_by("pk")[:2])
    HostedImage.objects.filter(pk__in=[image.pk for image in old]).update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    call_command("purge_images", "--batch-size", "1")
    assert "Deleted 2 hosted image(s) older than 24 hour(s)." in capsys.readouterr().out
    kept = HostedImage.objects.get()
    assert kept.pk not in {image.pk for image in old}
    assert default_storage.exists(kept.storage_name)
    assert not any(default_storage.exists(image.storage_name) for image in old)


# --- image_fetch -------------------------------------------------------------------------------------


def test_it_fetches_an_image_from_the_upstreams_own_host(openai_upstream, mocked, dns):
    data = image_bytes("JPEG")
    mocked.get(IMAGE_URL, body=data, content_type="image/jpeg")
    assert image_fetch(url=IMAGE_URL, upstream=openai_upstream) == data
    assert "Authorization" not in mocked.calls[0].request.headers


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/img.png",
        "https://images.provider.test/img.png",
        "http://api.provider.test/img.png",
        "https://api.provider.test:8443/img.png",
        "http://169.254.169.254/latest/meta-data/",
        "file:///etc/passwd",
    ],
)
def test_it_refuses_an_image_url_pointing_elsewhere(openai_upstream, mocked, dns, url):
    # Every other host resolves and answers an image, so only the host rule can refuse it.
    dns["evil.example"] = dns["images.provider.test"] = [["93.184.215.15"]]
    if url.startswith("http"):
        mocked.get(url, body=image_bytes(), content_type="image/png")
    with pytest.raises(UpstreamError, match="not on the upstream's own host") as info:
        image_fetch(url=url, upstream=openai_upstream)
    assert len(mocked.calls) == 0
    api_error = upstream_error_to_api_error(error=info.value, upstream=openai_upstream)
    assert (api_error.status, api_error.type) == (502, "upstream_error")
    assert "evil" not in api_error.message and "169.254" not in api_error.message


def test_it_follows_a_redirect_on_the_same_host(openai_upstream, mocked, dns):
    data = image_bytes()
    mocked.get(IMAGE_URL, status=302, headers={"Location": "/files/moved.png"})
    mocked.get("https://api.provider.test/files/moved.png", body=data, content_type="image/png")
    assert image_fetch(url=IMAGE_URL, upstream=openai_upstream) == data


def test_it_refuses_a_redirect_to_another_host(openai_upstream, mocked, dns):
    mocked.get(IMAGE_URL, status=302, headers={"Location": "http://127.0.0.1:6379/"})
    with pytest.raises(UpstreamError):
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)
    assert [call.request.url for call in mocked.calls] == [IMAGE_URL]


def test_it_refuses_its_own_host_when_it_resolves_to_a_private_address(openai_upstream, mocked, dns):
    dns["api.provider.test"] = [["93.184.215.14"], ["127.0.0.1"]]  # DNS rebinding after the first lookup
    mocked.get(IMAGE_URL, body=image_bytes(), content_type="image/png")
    with pytest.raises(UpstreamError, match="non-public"):
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)
    assert len(mocked.calls) == 0


def test_it_allows_a_private_address_when_the_upstream_itself_lives_there(local_upstream, mocked):
    data = image_bytes()
    url = "http://127.0.0.1:9400/v1/files/a.png"
    mocked.get(url, body=data, content_type="image/png")
    assert image_fetch(url=url, upstream=local_upstream) == data


def test_it_refuses_an_image_over_the_size_cap(openai_upstream, mocked, dns, settings):
    settings.GATEWAY_FETCH_MAX_BYTES = 1024
    mocked.get(IMAGE_URL, body=b"\x89PNG\r\n\x1a\n" + b"\0" * 4096, content_type="image/png")
    with pytest.raises(UpstreamError, match="larger than 1024"):
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)


def test_it_refuses_a_download_that_is_not_an_image(openai_upstream, mocked, dns):
    mocked.get(IMAGE_URL, body="<html>login</html>", content_type="text/html")
    with pytest.raises(UpstreamError, match="not a PNG"):
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)


def test_a_download_that_times_out_is_a_504(openai_upstream, mocked, dns):
    mocked.get(IMAGE_URL, body=requests.ReadTimeout("slow"))
    with pytest.raises(UpstreamError) as info:
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)
    assert upstream_error_to_api_error(error=info.value, upstream=openai_upstream).status == 504


def test_a_download_answering_an_error_status_is_refused(openai_upstream, mocked, dns):
    mocked.get(IMAGE_URL, status=403, body="AccessDenied")
    with pytest.raises(UpstreamError, match="HTTP 403"):
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)


# --- parser confusion: the host checked must be the host connected to ---------------------------------


@pytest.fixture
def two_local_servers(db, provider_key):
    """(an `openai` upstream served on 127.0.0.1, the port of another local server answering a PNG)."""
    png = image_bytes()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n" % len(png) + png
    own, other = RawUpstream(answer), RawUpstream(answer)
    upstream = upstream_make(name="local", base_url=own.base_url, api_key_env=OPENAI_KEY_ENV)
    yield upstream, own, other
    own.close()
    other.close()


def test_a_backslash_cannot_send_the_download_to_another_port(two_local_servers):
    upstream, own, other = two_local_servers
    own_port, other_port = own.server.server_address[1], other.server.server_address[1]
    url = f"http://127.0.0.1:{other_port}\\@127.0.0.1:{own_port}/x.png"
    with pytest.raises(UpstreamError):
        image_fetch(url=url, upstream=upstream)
    assert other.received == []
    assert own.received == []


def test_the_address_connected_to_must_be_public_when_the_upstream_is(provider_key, dns, db):
    """DNS rebinding between the gateway's own lookup and the connection's: the peer is checked."""
    png = image_bytes()
    local = RawUpstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n" % len(png) + png
    )
    port = local.server.server_address[1]
    try:
        upstream = upstream_make(
            name="rebinding", base_url=f"http://rebind.test:{port}/v1", api_key_env=OPENAI_KEY_ENV
        )
        # public for the gateway's two lookups, then loopback for the connection's own
        dns["rebind.test"] = [["93.184.215.14"], ["93.184.215.14"], ["127.0.0.1"]]
        with pytest.raises(UpstreamError, match="non-public"):
            image_fetch(url=f"http://rebind.test:{port}/v1/files/a.png", upstream=upstream)
    finally:
        local.close()


@pytest.mark.parametrize(
    "url",
    [
        "https://api.provider.test\\@evil.example/x.png",
        "https://evil.example\\@api.provider.test/x.png",
        "https://evil.example\\.api.provider.test/x.png",
        "https://user@api.provider.test/x.png",
        "https://user:pass@api.provider.test/x.png",
        "https://api.provider.test@evil.example/x.png",
        "https://api.provider.test:443@evil.example/x.png",
        "https://evil.example#@api.provider.test/x.png",
        "https://evil.example?@api.provider.test/x.png",
        "https://evil.example%23@api.provider.test/x.png",
        "https://api%2eprovider.test/x.png",
        "https://api.provider.test%2f@evil.example/x.png",
        "https://[::ffff:5db8:d70e]/x.png",
        "https://[::1]/x.png",
        "http://2130706433/x.png",
        "http://0177.0.0.1/x.png",
        "http://0x7f.0.0.1/x.png",
        "https://api.provider.test./x.png",
        "HTTPS://api.provider.test/x.png",
        "https://API.provider.test/x.png",
        "https://api.provider.test\t/x.png",
        "https://api.pro\tvider.test/x.png",
        "https://api.provider.test/x\n.png",
        "https://api.provider.test/x\r\nHost: evil.example",
        " https://api.provider.test/x.png",
        "https://api.provider.test /x.png",
        "https://api.provider.test/x\x00.png",
        "https://api.provider.test:0443/x.png",
        "https:/api.provider.test/x.png",
        "https:api.provider.test/x.png",
        "//api.provider.test/x.png",
        "https://api.provider.tést/x.png",
    ],
)
def test_it_refuses_a_url_two_parsers_could_read_differently(openai_upstream, mocked, dns, url):
    dns["evil.example"] = [["93.184.215.15"]]
    mocked.get(IMAGE_URL, body=image_bytes(), content_type="image/png")
    with pytest.raises(UpstreamError):
        image_fetch(url=url, upstream=openai_upstream)
    assert len(mocked.calls) == 0


def test_a_redirect_to_a_confusing_url_is_refused(openai_upstream, mocked, dns):
    mocked.get(IMAGE_URL, status=302, headers={"Location": "https://evil.example\\@api.provider.test/x.png"})
    with pytest.raises(UpstreamError):
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)
    assert [call.request.url for call in mocked.calls] == [IMAGE_URL]


@pytest.mark.parametrize(
    "location", ["http://[::1]:9404/x.png", "http://[::1/x.png", "http://::1]:9404/x.png"]
)
def test_a_redirect_to_an_ipv6_literal_or_a_broken_one_is_refused_like_any_other(
    openai_upstream, mocked, dns, location
):
    mocked.get(IMAGE_URL, status=302, headers={"Location": location})
    with pytest.raises(UpstreamError) as info:
        image_fetch(url=IMAGE_URL, upstream=openai_upstream)
    assert [call.request.url for call in mocked.calls] == [IMAGE_URL]
    api_error = upstream_error_to_api_error(error=info.value, upstream=openai_upstream)
    assert (api_error.status, api_error.type) == (502, "upstream_error")
