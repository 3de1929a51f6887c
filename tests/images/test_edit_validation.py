"""An edit's validation (the form fields, then the uploads) and the upload checks: strict form
fields, and the upload attacks of the issue."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
import zlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile, TemporaryUploadedFile
from django.http import QueryDict
from django.test import RequestFactory
from django.utils.datastructures import MultiValueDict
from PIL import Image

from core.errors import InvalidRequest, PayloadTooLarge
from images.uploads import edit_uploads_decode
from images.validation import edit_fields_validate
from tests.images.conftest import image_bytes, mask_bytes

pytestmark = pytest.mark.django_db

MB = 1024 * 1024


def form(**fields) -> QueryDict:
    data = QueryDict(mutable=True)
    for name, value in fields.items():
        data.setlist(name, value if isinstance(value, list) else [value])
    return data


def upload(data: bytes, name: str = "image.png", content_type: str = "image/png") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type=content_type)


def files(**parts) -> MultiValueDict:
    return MultiValueDict(
        {name: value if isinstance(value, list) else [value] for name, value in parts.items()}
    )


def edit_validate(*, data, files, image_model):
    """An edit's validation in the pipeline's two steps (images/pipeline.py): the cheap checks of the
    form fields and the file parts, then the reading and decoding of the files."""
    params, uploads = edit_fields_validate(data=data, files=files, image_model=image_model)
    images, mask = edit_uploads_decode(uploads=uploads)
    return params, images, mask


def validate(model, data=None, uploads=None):
    return edit_validate(
        data=data if data is not None else form(prompt="make it blue"),
        files=uploads if uploads is not None else files(image=upload(image_bytes())),
        image_model=model,
    )


def refused(model, data=None, uploads=None, error=InvalidRequest):
    with pytest.raises(error) as info:
        validate(model, data, uploads)
    return info.value


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares the given size, followed by a tiny compressed body."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 1024))
        + chunk(b"IEND", b"")
    )


def noisy(fmt: str) -> bytes:
    """An image whose compressed body is large enough that cutting it in half truncates pixel data."""
    image = Image.effect_noise((256, 256), 80).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


# --- form fields ------------------------------------------------------------------------------------


def test_it_accepts_an_edit_and_returns_the_image_and_mask_bytes(alpha_model):
    source, mask = image_bytes(), mask_bytes()
    params, images, got_mask = validate(
        alpha_model,
        form(prompt="make it blue", n="2", size="1024x1024", input_fidelity="high", quality="low"),
        files(image=upload(source), mask=upload(mask, "mask.png")),
    )
    assert (params.prompt, params.n, params.size) == ("make it blue", 2, "1024x1024")
    assert params.options == {"quality": "low", "input_fidelity": "high"}
    assert images == (source,)
    assert got_mask == mask


def test_it_refuses_edits_on_a_model_without_them(plain_model):
    error = refused(plain_model)
    assert (error.param, error.code) == ("model", "edits_not_supported")


def test_it_requires_prompt_in_the_form(alpha_model):
    error = refused(alpha_model, form(n="1"))
    assert (error.param, error.code) == ("prompt", "missing_required_parameter")


@pytest.mark.parametrize("text", ["2.5", "-1", "true", "", " 2", "2 ", "two", "٢", "1e3", "+2"])
def test_it_parses_n_in_a_form_strictly(alpha_model, text):
    error = refused(alpha_model, form(prompt="p", n=text))
    assert (error.param, error.code) == ("n", "invalid_type")


@pytest.mark.parametrize(("text", "code"), [("0", "invalid_value"), ("5", "invalid_value")])
def test_it_refuses_n_out_of_range_in_a_form(alpha_model, text, code):
    error = refused(alpha_model, form(prompt="p", n=text))
    assert (error.param, error.code) == ("n", code)


def test_it_refuses_a_form_field_given_twice(alpha_model):
    error = refused(alpha_model, form(prompt=["a", "b"]))
    assert error.param == "prompt"
    assert "2 times" in error.message


def test_it_validates_form_fields_like_generation(alpha_model):
    assert refused(alpha_model, form(prompt="p", size="999x999")).param == "size"
    assert refused(alpha_model, form(prompt="p", output_compression="50")).param == "output_compression"
    assert refused(alpha_model, form(prompt="p", stream="true")).code == "unsupported_parameter"


def test_it_parses_booleans_in_a_form_strictly(streaming_model):
    params, _, _ = validate(streaming_model, form(prompt="p", stream="true", partial_images="2"))
    assert params.options == {"stream": True, "partial_images": 2}
    error = refused(streaming_model, form(prompt="p", stream="yes"))
    assert (error.param, error.code) == ("stream", "invalid_type")


def test_it_drops_form_fields_outside_the_spec(alpha_model):
    params, _, _ = validate(alpha_model, form(prompt="p", seed="3", model="alpha-image-2", extra="x"))
    assert params.options == {}


# --- the uploads ------------------------------------------------------------------------------------


def test_it_requires_an_image(alpha_model):
    error = refused(alpha_model, uploads=files())
    assert (error.param, error.code) == ("image", "missing_required_parameter")


def test_it_refuses_an_image_sent_as_a_text_field(alpha_model):
    error = refused(alpha_model, form(prompt="p", image="https://example.com/cat.png"), files())
    assert (error.param, error.code) == ("image", "invalid_type")


def test_it_accepts_several_images_as_image_brackets_in_order(alpha_model):
    first, second = image_bytes(colour=(1, 2, 3)), image_bytes("WEBP", colour=(9, 9, 9))
    _, images, _ = validate(
        alpha_model, uploads=files(**{"image[]": [upload(first), upload(second, "b.webp")]})
    )
    assert images == (first, second)


def test_it_refuses_more_images_than_allowed(alpha_model, settings):
    settings.GATEWAY_MAX_EDIT_IMAGES = 2
    error = refused(alpha_model, uploads=files(**{"image[]": [upload(image_bytes())] * 3}))
    assert (error.param, error.code) == ("image[]", "too_many_images")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_it_accepts_png_jpeg_and_webp(alpha_model, fmt):
    data = image_bytes(fmt)
    assert validate(alpha_model, uploads=files(image=upload(data)))[1] == (data,)


def test_it_accepts_a_jpeg_sent_as_image_png_as_a_jpeg(alpha_model):
    data = image_bytes("JPEG")
    _, images, _ = validate(alpha_model, uploads=files(image=upload(data, "photo.png", "image/png")))
    assert images == (data,)
    assert Image.open(io.BytesIO(images[0])).format == "JPEG"


def test_it_refuses_a_zip_renamed_to_png(alpha_model):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("payload.txt", "not an image")
    error = refused(alpha_model, uploads=files(image=upload(archive.getvalue(), "cat.png", "image/png")))
    assert (error.param, error.code) == ("image", "invalid_image_format")
    assert "PNG, JPEG or WebP" in error.message


def test_it_refuses_a_gif(alpha_model):
    error = refused(alpha_model, uploads=files(image=upload(image_bytes("GIF"), "a.png")))
    assert error.code == "invalid_image_format"


def test_it_refuses_a_png_header_declaring_30000x30000(alpha_model):
    error = refused(alpha_model, uploads=files(image=upload(png_declaring(30000, 30000))))
    assert (error.status, error.param, error.code) == (400, "image", "image_too_large")


def test_it_refuses_an_image_over_the_configured_pixel_cap(alpha_model, settings):
    settings.GATEWAY_MAX_IMAGE_PIXELS = 64 * 48 - 1
    error = refused(alpha_model, uploads=files(image=upload(image_bytes(size=(64, 48)))))
    assert (error.param, error.code) == ("image", "image_too_large")
    assert "64x48" in error.message


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_it_refuses_a_truncated_image(alpha_model, fmt):
    data = noisy(fmt)
    error = refused(alpha_model, uploads=files(image=upload(data[: len(data) // 2])))
    assert (error.status, error.param, error.code) == (400, "image", "invalid_image")
    assert "truncated or corrupt" in error.message


def test_it_refuses_a_mask_of_other_dimensions(alpha_model):
    error = refused(
        alpha_model,
        uploads=files(image=upload(image_bytes(size=(64, 48))), mask=upload(mask_bytes((48, 64)), "m.png")),
    )
    assert (error.param, error.code) == ("mask", "invalid_mask")
    assert "48x64" in error.message and "64x48" in error.message


def test_it_refuses_a_mask_without_alpha(alpha_model):
    error = refused(
        alpha_model, uploads=files(image=upload(image_bytes()), mask=upload(image_bytes(), "m.png"))
    )
    assert (error.param, error.code) == ("mask", "invalid_mask")
    assert "alpha" in error.message


def test_it_refuses_a_mask_that_is_not_a_png(alpha_model):
    error = refused(
        alpha_model,
        uploads=files(image=upload(image_bytes()), mask=upload(image_bytes("WEBP", mode="RGBA"), "m.png")),
    )
    assert (error.param, error.code) == ("mask", "invalid_mask")


def test_it_refuses_two_masks(alpha_model):
    error = refused(alpha_model, uploads=files(image=upload(image_bytes()), mask=[upload(mask_bytes())] * 2))
    assert error.param == "mask"


def test_it_refuses_a_file_over_the_per_file_limit_with_413(alpha_model, settings):
    settings.GATEWAY_MAX_UPLOAD_BYTES = 1024
    error = refused(alpha_model, uploads=files(image=upload(noisy("PNG"))), error=PayloadTooLarge)
    assert (error.status, error.param, error.code) == (413, "image", "file_too_large")


def _multipart_request(payload: bytes):
    return RequestFactory().post(
        "/v1/images/edits",
        data={
            "prompt": "p",
            "model": "alpha-image-2",
            "image": SimpleUploadedFile("big.png", payload, "image/png"),
        },
    )


def test_a_30_mb_upload_is_stopped_with_413_while_it_is_received_and_memory_stays_small(alpha_model):
    request = _multipart_request(b"\x89PNG\r\n\x1a\n" + b"\0" * (30 * MB))
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLarge) as info:
            request.FILES  # noqa: B018 - parsing the body runs the upload handlers
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (info.value.status, info.value.param) == (413, "image")
    assert peak < 3 * MB, f"parsing peaked at {peak / MB:.1f} MB"


def test_without_the_upload_handler_a_30_mb_file_spools_to_disk_and_is_refused_unread(alpha_model, settings):
    settings.FILE_UPLOAD_HANDLERS = [
        "django.core.files.uploadhandler.MemoryFileUploadHandler",
        "django.core.files.uploadhandler.TemporaryFileUploadHandler",
    ]
    request = _multipart_request(b"\x89PNG\r\n\x1a\n" + b"\0" * (30 * MB))
    tracemalloc.start()
    try:
        uploaded = request.FILES
        assert isinstance(uploaded["image"], TemporaryUploadedFile)
        with pytest.raises(PayloadTooLarge) as info:
            edit_validate(data=request.POST, files=uploaded, image_model=alpha_model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (info.value.status, info.value.code) == (413, "file_too_large")
    assert peak < 3 * MB, f"parsing and validation peaked at {peak / MB:.1f} MB"


def test_the_upload_handler_refuses_more_files_than_an_edit_may_carry(settings):
    settings.GATEWAY_MAX_EDIT_IMAGES = 2
    request = RequestFactory().post(
        "/v1/images/edits",
        data={
            "prompt": "p",
            "image[]": [SimpleUploadedFile(f"{i}.png", image_bytes(), "image/png") for i in range(4)],
        },
    )
    with pytest.raises(InvalidRequest) as info:
        request.FILES  # noqa: B018
    assert info.value.code == "too_many_files"


def test_an_upload_within_the_limits_parses_and_validates(alpha_model):
    data = image_bytes("JPEG")
    request = RequestFactory().post(
        "/v1/images/edits",
        data={"prompt": "p", "n": "2", "image": SimpleUploadedFile("x.png", data, "image/png")},
    )
    params, images, mask = edit_validate(data=request.POST, files=request.FILES, image_model=alpha_model)
    assert (params.n, images, mask) == (2, (data,), None)
