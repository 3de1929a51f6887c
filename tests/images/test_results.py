"""result_render and result_body: the response body, with the conversions between url and b64_json."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import logging
import tracemalloc
from urllib.parse import urlsplit

import pytest

from images.models import HostedImage
from images.results import base64_strict_valid, result_body, result_render
from tests.fake_upstream import _png
from tests.images.conftest import image_bytes
from upstreams.providers.base import ImageItem, ImageResult, UpstreamError

pytestmark = pytest.mark.django_db

UPSTREAM_URL = "https://api.provider.test/files/img-1.png"


def render(result, response_format, upstream, output_format=None):
    """The answer's body as the caller receives it, parsed."""
    rendered = result_render(
        result=result, response_format=response_format, upstream=upstream, output_format=output_format
    )
    return json.loads(result_body(rendered=rendered))


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


# --- the body as bytes, and the checks made without decoding the image -------------------------------

LARGE_PNG = _png(pad_to=4_000_000)  # a valid PNG padded to ~4 MB, as the bench's large upstream serves
LARGE_B64 = b64(LARGE_PNG)


def body_of(result, response_format, upstream, output_format=None) -> bytes:
    rendered = result_render(
        result=result, response_format=response_format, upstream=upstream, output_format=output_format
    )
    return result_body(rendered=rendered)


def dumps(value) -> bytes:
    """How the body was built before: json.dumps of the whole dict."""
    return json.dumps(value, separators=(",", ":")).encode()


TRICKY_TEXT = 'He said "draw a \\ and a /"\n\t\x00\x1f é 猫 😀 \u2028 </script>'


def test_it_builds_the_body_byte_for_byte_as_json_dumps_of_the_dict(openai_upstream):
    first, second = b64(image_bytes("PNG")), b64(image_bytes("JPEG"))
    usage = {"total_tokens": 10, "input_tokens_details": {"text_tokens": 4, "note": TRICKY_TEXT}}
    result = ImageResult(
        created=1700000000,
        items=(
            ImageItem(b64_json=first, revised_prompt=TRICKY_TEXT),
            ImageItem(b64_json="data:image/jpeg;base64," + second),
            ImageItem(b64_json=first, revised_prompt=""),
        ),
        usage=usage,
    )
    assert body_of(result, "b64_json", openai_upstream) == dumps(
        {
            "created": 1700000000,
            "data": [
                {"b64_json": first, "revised_prompt": TRICKY_TEXT},
                {"b64_json": second},
                {"b64_json": first},
            ],
            "usage": usage,
        }
    )


def test_it_builds_url_bodies_byte_for_byte_as_json_dumps_of_the_dict(openai_upstream, mocked, dns):
    odd_url = 'https://api.provider.test/files/a "b".png?x=é&y=\\'
    result = ImageResult(
        created=5,
        items=(ImageItem(url=UPSTREAM_URL, revised_prompt=TRICKY_TEXT), ImageItem(url=odd_url)),
    )
    assert body_of(result, "url", openai_upstream) == dumps(
        {"created": 5, "data": [{"url": UPSTREAM_URL, "revised_prompt": TRICKY_TEXT}, {"url": odd_url}]}
    )

    hosted = ImageResult(created=6, items=(ImageItem(b64_json=b64(image_bytes()), revised_prompt="r"),))
    body = body_of(hosted, "url", openai_upstream)
    parsed = json.loads(body)
    assert parsed["data"][0]["url"].startswith("http") and parsed["data"][0]["revised_prompt"] == "r"
    assert body == dumps(parsed)  # the same bytes json.dumps makes of what it says


def test_it_passes_a_large_image_on_exactly_as_the_upstream_sent_it(openai_upstream):
    result = ImageResult(created=1, items=(ImageItem(b64_json=LARGE_B64, revised_prompt="big"),))
    body = body_of(result, "b64_json", openai_upstream)
    assert body == dumps({"created": 1, "data": [{"b64_json": LARGE_B64, "revised_prompt": "big"}]})


def test_it_holds_a_large_image_at_most_twice_while_building_the_body(openai_upstream):
    # As the pipeline does it: render, drop the upstream's result, build the body. tracemalloc counts
    # every allocation, so the peak is the same on every run (no timing is involved).
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        result = ImageResult(created=1, items=(ImageItem(b64_json=b64(LARGE_PNG)),))  # the image, once
        tracemalloc.reset_peak()
        rendered = result_render(
            result=result, response_format="b64_json", upstream=openai_upstream, output_format=None
        )
        del result
        body = result_body(rendered=rendered)
        del rendered
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    assert len(body) > len(LARGE_B64)
    # Two copies of the body at the worst moment (base64 in, body out), plus small change.
    assert peak < 2 * len(body) + 1_000_000


@pytest.mark.parametrize(
    "data",
    [
        b"GIF89a" + b"\0" * 64,
        b"<svg xmlns='http://www.w3.org/2000/svg'/>",
        b"\0" + image_bytes("PNG"),  # the signature, one byte late
        image_bytes("JPEG")[1:],  # the signature, one byte short
        b"RIFF\0\0\0\0WEBX" + b"\0" * 64,
        b"",
    ],
)
def test_it_refuses_base64_whose_first_bytes_are_no_png_jpeg_or_webp(openai_upstream, data):
    for response_format in ("b64_json", "url"):
        with pytest.raises(UpstreamError) as info:
            render(
                ImageResult(created=1, items=(ImageItem(b64_json=b64(data) or "AAAA"),)),
                response_format,
                openai_upstream,
            )
        assert info.value.status == 502
    assert HostedImage.objects.count() == 0


CORRUPTIONS = {
    "a non-base64 character near the end": lambda s: s[:-10] + "!" + s[-9:],
    "a newline in the middle": lambda s: s[: len(s) // 2] + "\n" + s[len(s) // 2 + 1 :],
    "padding in the middle": lambda s: s[: len(s) // 2] + "=" + s[len(s) // 2 + 1 :],
    "a non-ASCII character at the end": lambda s: s[:-1] + "é",
    "one character missing": lambda s: s[:-1],
    "three characters missing": lambda s: s[:-3],
    "surplus padding": lambda s: s + "====",
    "URL-safe alphabet": lambda s: s[:-8].replace("+", "-").replace("/", "_") + "-_" + s[-6:],
}


@pytest.mark.parametrize("corruption", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_it_refuses_a_large_image_whose_base64_is_broken_anywhere(openai_upstream, corruption):
    broken = corruption(LARGE_B64)
    for response_format in ("b64_json", "url"):
        with pytest.raises(UpstreamError) as info:
            render(
                ImageResult(created=1, items=(ImageItem(b64_json=broken),)), response_format, openai_upstream
            )
        assert info.value.status == 502
    assert HostedImage.objects.count() == 0


def test_a_truncated_image_with_the_right_signature_is_passed_on_as_given(openai_upstream, client):
    # Only the signature is checked (nothing decodes the pixels), as before: the caller gets exactly
    # what the upstream made, and a hosted copy serves the same bytes.
    truncated = image_bytes("PNG", size=(256, 256))[:300]
    result = ImageResult(created=1, items=(ImageItem(b64_json=b64(truncated)),))
    assert render(result, "b64_json", openai_upstream)["data"] == [{"b64_json": b64(truncated)}]
    hosted = render(result, "url", openai_upstream)["data"][0]["url"]
    response = client.get(urlsplit(hosted).path)
    assert response["Content-Type"] == "image/png"
    assert b"".join(response.streaming_content) == truncated


def test_a_data_url_prefix_is_removed_whatever_its_case(openai_upstream):
    data = image_bytes("WEBP")
    result = ImageResult(created=1, items=(ImageItem(b64_json="DATA:IMAGE/WEBP;BASE64," + b64(data)),))
    assert render(result, "b64_json", openai_upstream)["data"] == [{"b64_json": b64(data)}]


def test_an_image_in_another_format_than_asked_is_passed_on_and_logged(openai_upstream, caplog):
    encoded = b64(image_bytes("PNG"))
    with caplog.at_level(logging.INFO, logger="gateway.images"):
        body = render(
            ImageResult(created=1, items=(ImageItem(b64_json=encoded),)), "b64_json", openai_upstream, "jpeg"
        )
    assert body["data"] == [{"b64_json": encoded}]
    assert "upstream answered png although output_format jpeg was asked" in caplog.text


def test_it_accepts_exactly_the_strict_base64_binascii_accepts_with_canonical_padding():
    # Every string of up to 6 characters over an alphabet with data, padding and junk characters.
    alphabet = b"AQg+/=\n-"
    checked = 0
    for length in range(7):
        for combination in itertools.product(alphabet, repeat=length):
            data = bytes(combination)
            try:
                binascii.a2b_base64(data, strict_mode=True)
            except binascii.Error:
                expected = False
            else:  # binascii also tolerates surplus padding after a whole group (b"AAAA="): not us
                expected = len(data) % 4 == 0 and data.count(b"=") <= 2
            assert base64_strict_valid(data=data) is expected, data
            assert base64_strict_valid(data=data.decode("ascii")) is expected, data
            checked += 1
    assert checked == sum(len(alphabet) ** n for n in range(7))
