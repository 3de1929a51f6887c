import base64
import io

import pytest
from PIL import Image

from upstreams.providers import adapter_for
from upstreams.providers.base import ImageRequest, UpstreamError

pytestmark = pytest.mark.django_db


def decode(item) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(item.b64_json)))
    image.load()
    return image


@pytest.mark.parametrize(
    ("output_format", "pil_format"), [("png", "PNG"), ("jpeg", "JPEG"), ("webp", "WEBP")]
)
def test_it_generates_decodable_images_of_the_requested_format_and_size(
    demo_upstream, output_format, pil_format
):
    result = adapter_for(demo_upstream).image_call(
        ImageRequest(
            operation="generate",
            upstream_model="m",
            prompt="a red fox in snow",
            n=2,
            size="512x256",
            output_format=output_format,
        )
    )
    assert len(result.items) == 2
    for item in result.items:
        image = decode(item)
        assert image.format == pil_format
        assert image.size == (512, 256)
        assert item.revised_prompt == "a red fox in snow"
    # The two images differ (each is numbered), and the prompt drives the colour.
    assert result.items[0].b64_json != result.items[1].b64_json


def test_it_draws_the_prompt_so_different_prompts_give_different_images(demo_upstream):
    adapter = adapter_for(demo_upstream)
    first = adapter.image_call(
        ImageRequest(operation="generate", upstream_model="m", prompt="one", size="64x64")
    )
    second = adapter.image_call(
        ImageRequest(operation="generate", upstream_model="m", prompt="two", size="64x64")
    )
    assert decode(first.items[0]).tobytes() != decode(second.items[0]).tobytes()


def test_it_makes_transparent_backgrounds(demo_upstream):
    result = adapter_for(demo_upstream).image_call(
        ImageRequest(
            operation="generate",
            upstream_model="m",
            prompt="x",
            size="64x64",
            output_format="png",
            options={"background": "transparent"},
        )
    )
    image = decode(result.items[0])
    assert image.mode == "RGBA"
    assert image.getpixel((63, 63))[3] == 0


def test_it_edits_only_where_the_mask_is_transparent(demo_upstream):
    source = Image.new("RGB", (100, 100), (255, 255, 255))
    mask = Image.new("RGBA", (100, 100), (0, 0, 0, 255))
    mask.paste((0, 0, 0, 0), (50, 50, 100, 100))  # transparent bottom-right quarter is replaced
    buffers = []
    for image in (source, mask):
        buffer = io.BytesIO()
        image.save(buffer, "PNG")
        buffers.append(buffer.getvalue())
    result = adapter_for(demo_upstream).image_call(
        ImageRequest(
            operation="edit",
            upstream_model="m",
            prompt="x",
            output_format="png",
            images=(buffers[0],),
            mask=buffers[1],
        )
    )
    edited = decode(result.items[0]).convert("RGB")
    assert edited.size == (100, 100)
    assert edited.getpixel((99, 99)) != (255, 255, 255)
    assert edited.getpixel((99, 5)) == (255, 255, 255)


def test_it_refuses_sizes_it_cannot_make(demo_upstream):
    with pytest.raises(UpstreamError) as info:
        adapter_for(demo_upstream).image_call(
            ImageRequest(operation="generate", upstream_model="m", prompt="x", size="99999x1")
        )
    assert info.value.status == 400
    assert info.value.retryable is False
