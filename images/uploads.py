"""Strict checks of uploaded images and masks, and the upload handler that bounds what a request may send.

The format of an upload is decided by its bytes only (magic numbers, then Pillow restricted to PNG, JPEG
and WebP), never by its file name or declared content type. Every image is fully decoded once, so a
truncated or corrupt file is refused here instead of failing upstream after money was reserved.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict
from PIL import Image

from core.errors import InvalidRequest, PayloadTooLarge
from upstreams.imageformats import image_format_sniff

# Pillow only warns on a decompression bomb (and errors at twice its limit): make the warning an error.
# This is defence in depth; `_decode_check` enforces GATEWAY_MAX_IMAGE_PIXELS itself before decoding.
warnings.filterwarnings("error", category=Image.DecompressionBombWarning)

PIL_FORMATS = ("PNG", "JPEG", "WEBP")
FORMAT_NAMES = {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp"}
IMAGE_FIELDS = ("image", "image[]")
MASK_FIELD = "mask"


@dataclass(frozen=True)
class CheckedImage:
    """What the checks learnt about an uploaded image."""

    format: str  # png | jpeg | webp
    width: int
    height: int
    has_alpha: bool


def max_upload_files() -> int:
    """Files one edit request may carry: the images plus one mask."""
    return settings.GATEWAY_MAX_EDIT_IMAGES + 1


@dataclass(frozen=True)
class EditUploads:
    """The file parts of an edit, checked for count and size but not yet read: `edit_uploads_decode`
    reads and decodes them (the expensive part, done after every cheap refusal)."""

    images: tuple[tuple[str, UploadedFile], ...]
    mask: UploadedFile | None


def edit_uploads_collect(*, data: QueryDict, files: MultiValueDict) -> EditUploads:
    """The file parts of an edit: present, not sent as text, within the count and the per-file size
    (from the recorded sizes: nothing is read, so a huge file costs no memory)."""
    for name in (*IMAGE_FIELDS, MASK_FIELD):
        if any(not isinstance(value, UploadedFile) for value in data.getlist(name)):
            raise InvalidRequest(
                f"`{name}` must be sent as a file part of the multipart form, not as a text field.",
                param=name,
                code="invalid_type",
            )
    uploads = [(name, upload) for name in IMAGE_FIELDS for upload in files.getlist(name)]
    masks = files.getlist(MASK_FIELD)
    if not uploads:
        raise InvalidRequest(
            "`image` is required: the PNG, JPEG or WebP file to edit (repeat `image[]` for several).",
            param="image",
            code="missing_required_parameter",
        )
    limit = settings.GATEWAY_MAX_EDIT_IMAGES
    if len(uploads) > limit:
        raise InvalidRequest(
            f"At most {limit} images can be edited in one request; got {len(uploads)}.",
            param=uploads[0][0],
            code="too_many_images",
        )
    if len(masks) > 1:
        raise InvalidRequest(
            f"Send at most one `mask`; got {len(masks)}.", param=MASK_FIELD, code="invalid_value"
        )
    for name, upload in [*uploads, *((MASK_FIELD, mask) for mask in masks)]:
        upload_size_check(uploaded=upload, param=name)
    return EditUploads(images=tuple(uploads), mask=masks[0] if masks else None)


def edit_uploads_decode(*, uploads: EditUploads) -> tuple[tuple[bytes, ...], bytes | None]:
    """Read and fully decode the images and the mask (400 on any that is not a valid image).

    CPU-bound (a 16-megapixel PNG takes a good part of a second): the pipeline runs it through
    core.offload.cpu_bound, after every cheap refusal. It touches no database."""
    images: list[bytes] = []
    first = None
    for name, upload in uploads.images:
        content = upload_read(uploaded=upload, param=name)
        checked = image_bytes_check(data=content, param=name)
        first = first or checked
        images.append(content)
    mask: bytes | None = None
    if uploads.mask is not None:
        assert first is not None
        mask = upload_read(uploaded=uploads.mask, param=MASK_FIELD)
        # The mask applies to the first image (as upstream APIs define it).
        mask_bytes_check(data=mask, image=first)
    return tuple(images), mask


def upload_size_check(*, uploaded: UploadedFile, param: str) -> None:
    """413 when an upload is over the per-file limit, from its recorded size alone (nothing is read)."""
    limit = settings.GATEWAY_MAX_UPLOAD_BYTES
    if uploaded.size is None or uploaded.size > limit:
        raise _file_too_large(param=param, limit=limit)


def upload_read(*, uploaded: UploadedFile, param: str) -> bytes:
    """The bytes of an upload; its size is checked before anything is read."""
    upload_size_check(uploaded=uploaded, param=param)
    limit = settings.GATEWAY_MAX_UPLOAD_BYTES
    uploaded.seek(0)
    data = uploaded.read(limit + 1)
    if len(data) > limit:  # the recorded size was wrong
        raise _file_too_large(param=param, limit=limit)
    return data


def image_bytes_check(*, data: bytes, param: str) -> CheckedImage:
    """Refuse anything that is not a complete, decodable PNG, JPEG or WebP within the pixel cap."""
    sniffed = image_format_sniff(data=data)
    if sniffed is None:
        raise InvalidRequest(
            f"`{param}` must be a PNG, JPEG or WebP image; the uploaded bytes are none of these "
            "(the format is read from the file's content, not its name or declared type).",
            param=param,
            code="invalid_image_format",
        )
    return _decode_check(data=data, param=param, expected=sniffed)


def mask_bytes_check(*, data: bytes, image: CheckedImage) -> CheckedImage:
    """A mask is a PNG with an alpha channel and exactly the image's width and height."""
    if image_format_sniff(data=data) != "png":
        raise InvalidRequest(
            "`mask` must be a PNG image with an alpha channel; the uploaded bytes are not a PNG.",
            param=MASK_FIELD,
            code="invalid_mask",
        )
    mask = _decode_check(data=data, param=MASK_FIELD, expected="png")
    if not mask.has_alpha:
        raise InvalidRequest(
            "`mask` must have an alpha channel (RGBA): its transparent region marks what is edited.",
            param=MASK_FIELD,
            code="invalid_mask",
        )
    if (mask.width, mask.height) != (image.width, image.height):
        raise InvalidRequest(
            f"`mask` is {mask.width}x{mask.height} but the image is {image.width}x{image.height}; "
            "they must have the same dimensions.",
            param=MASK_FIELD,
            code="invalid_mask",
        )
    return mask


def _decode_check(*, data: bytes, param: str, expected: str) -> CheckedImage:
    cap = settings.GATEWAY_MAX_IMAGE_PIXELS
    # Pillow raises many exception types on hostile input (OSError, SyntaxError, ValueError,
    # struct.error, ...); any failure to parse untrusted bytes means "not a valid image".
    try:
        with Image.open(io.BytesIO(data), formats=PIL_FORMATS) as opened:
            fmt = FORMAT_NAMES.get(opened.format or "")
            width, height = opened.size
            if width * height > cap:
                raise _too_many_pixels(param=param, width=width, height=height, cap=cap)
            opened.verify()  # structure and checksums, without decoding the pixels
        with Image.open(io.BytesIO(data), formats=PIL_FORMATS) as opened:
            opened.load()  # decode every pixel: catches truncation that verify() cannot see
            has_alpha = opened.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
                opened.mode == "P" and "transparency" in opened.info
            )
    except InvalidRequest:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _too_many_pixels(param=param, width=None, height=None, cap=cap) from None
    except Exception:
        raise InvalidRequest(
            f"`{param}` could not be decoded: the image is truncated or corrupt.",
            param=param,
            code="invalid_image",
        ) from None
    if fmt != expected:
        raise InvalidRequest(
            f"`{param}` must be a PNG, JPEG or WebP image; its content does not match its signature.",
            param=param,
            code="invalid_image_format",
        )
    return CheckedImage(format=fmt, width=width, height=height, has_alpha=has_alpha)


def _too_many_pixels(*, param: str, width: int | None, height: int | None, cap: int) -> InvalidRequest:
    size = f" ({width}x{height})" if width is not None else ""
    return InvalidRequest(
        f"`{param}` has too many pixels{size}; at most {cap:,} pixels (width x height) are accepted.",
        param=param,
        code="image_too_large",
    )


def _file_too_large(*, param: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The file in `{param}` is larger than the {_megabytes(limit)} allowed per file.",
        param=param,
        code="file_too_large",
    )


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"


class UploadLimitHandler(FileUploadHandler):
    """First in FILE_UPLOAD_HANDLERS: stops a multipart upload as soon as one file passes the per-file
    limit (413) or the request carries more files than an edit may (400), so an attacker cannot make
    the gateway spool gigabytes to disk before the view even runs. It stores nothing itself."""

    def __init__(self, request=None) -> None:
        super().__init__(request)
        self.files_seen = 0
        self.limit = settings.GATEWAY_MAX_UPLOAD_BYTES

    def new_file(
        self, field_name, file_name, content_type, content_length, charset=None, content_type_extra=None
    ):
        super().new_file(field_name, file_name, content_type, content_length, charset, content_type_extra)
        self.files_seen += 1
        if self.files_seen > max_upload_files():
            raise InvalidRequest(
                f"Too many files: at most {settings.GATEWAY_MAX_EDIT_IMAGES} images and one mask.",
                param=field_name,
                code="too_many_files",
            )

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > self.limit:
            raise _file_too_large(param=self.field_name, limit=self.limit)
        return raw_data  # pass it on to the handler that stores it

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler returns the stored file
