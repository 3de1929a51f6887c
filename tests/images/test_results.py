"""result_render: the response body, with the conversions between url and b64_json."""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

import pytest

from images.models import HostedImage
from images.providers.base import ImageItem, ImageResult, UpstreamError
from images.results import result_render
from tests.images.conftest import image_bytes

pytestmark = pytest.mark.django_db

UPSTREAM_URL = "https://api.provider.test/files/img-1.png"


def render(result, response_format, upstream, output_format=None):
    return result_render(
        result=result, response_format=response_format, upstream=upstream, output_format=output_format
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_base64_asked_as_base64_is_passed_on_with_revised_prompt_and_usage(openai_upstream):
    encoded = b64(image_bytes())
    usage = {"total_tokens": 10, "input_tokens": 4, "output_tokens": 6}
    result = ImageResult(
        created=1700000000, items=(ImageItem(b64_json=encoded, revised_prompt="a fox"),), usage=usage
    )
    assert render(result, "b64_json", openai_upstream) == {
        "created": 1700000000,
        "data": [{"b64_json": encoded, "revised_prompt": "a fox"}],
        "usage": usage,
    }


def test_usage_is_left_out_when_the_upstream_gave_none(openai_upstream):
    body = render(
        ImageResult(created=1, items=(ImageItem(b64_json=b64(image_bytes())),)), "b64_json", openai_upstream
    )
    assert set(body) == {"created", "data"}


def test_base64_asked_as_url_is_hosted_and_the_url_serves_the_same_bytes(openai_upstream, client, settings):
    first, second = image_bytes("PNG"), image_bytes("JPEG")
    result = ImageResult(created=1, items=(ImageItem(b64_json=b64(first)), ImageItem(b64_json=b64(second))))
    body = render(result, "url", openai_upstream, output_format="png")
    assert [set(item) for item in body["data"]] == [{"url"}, {"url"}]
    for item, data, content_type in zip(
        body["data"], (first, second), ("image/png", "image/jpeg"), strict=True
    ):
        assert item["url"].startswith(settings.GATEWAY_PUBLIC_URL + "/files/images/")
        response = client.get(urlsplit(item["url"]).path)
        assert response.status_code == 200
        assert response["Content-Type"] == content_type
        assert b"".join(response.streaming_content) == data
    assert HostedImage.objects.count() == 2


def test_a_data_url_from_the_upstream_is_read_as_base64(openai_upstream):
    data = image_bytes()
    result = ImageResult(created=1, items=(ImageItem(b64_json="data:image/png;base64," + b64(data)),))
    assert render(result, "b64_json", openai_upstream)["data"] == [{"b64_json": b64(data)}]


def test_a_url_asked_as_base64_is_downloaded_and_encoded(openai_upstream, mocked, dns):
    data = image_bytes("WEBP")
    mocked.get(UPSTREAM_URL, body=data, content_type="image/webp")
    result = ImageResult(created=1, items=(ImageItem(url=UPSTREAM_URL, revised_prompt="r"),))
    assert render(result, "b64_json", openai_upstream)["data"] == [
        {"b64_json": b64(data), "revised_prompt": "r"}
    ]


def test_a_url_asked_as_url_is_passed_on(openai_upstream, mocked, dns):
    result = ImageResult(created=1, items=(ImageItem(url=UPSTREAM_URL),))
    assert render(result, "url", openai_upstream)["data"] == [{"url": UPSTREAM_URL}]
    assert len(mocked.calls) == 0


def test_a_url_from_an_upstream_on_a_private_address_is_rehosted(local_upstream, mocked, client, settings):
    data = image_bytes()
    url = "http://127.0.0.1:9400/v1/files/a.png"
    mocked.get(url, body=data, content_type="image/png")
    body = render(ImageResult(created=1, items=(ImageItem(url=url),)), "url", local_upstream)
    hosted = body["data"][0]["url"]
    assert hosted.startswith(settings.GATEWAY_PUBLIC_URL) and "127.0.0.1:9400" not in hosted
    assert b"".join(client.get(urlsplit(hosted).path).streaming_content) == data


def test_a_url_on_another_host_asked_as_base64_fails_as_an_upstream_error(openai_upstream, mocked, dns):
    result = ImageResult(created=1, items=(ImageItem(url="https://cdn.elsewhere.example/a.png"),))
    with pytest.raises(UpstreamError) as info:
        render(result, "b64_json", openai_upstream)
    assert info.value.status == 502
    assert len(mocked.calls) == 0


@pytest.mark.parametrize(
    "encoded", ["not base64 !!", b64(b"GIF89a not allowed"), b64(b"<svg onload=alert(1)>")]
)
def test_invalid_or_non_image_base64_fails_as_an_upstream_error(openai_upstream, encoded):
    for response_format in ("b64_json", "url"):
        with pytest.raises(UpstreamError):
            render(
                ImageResult(created=1, items=(ImageItem(b64_json=encoded),)), response_format, openai_upstream
            )
    assert HostedImage.objects.count() == 0


def test_a_non_http_url_from_the_upstream_is_refused(openai_upstream):
    with pytest.raises(UpstreamError):
        render(ImageResult(created=1, items=(ImageItem(url="javascript:alert(1)"),)), "url", openai_upstream)
