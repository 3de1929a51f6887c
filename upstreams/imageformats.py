"""Image formats the gateway handles, told by their magic numbers: shared by the adapters (which name
uploads and answers) and the image endpoints (which check uploads)."""

from __future__ import annotations

CONTENT_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}


def image_format_sniff(*, data: bytes) -> str | None:
    """The format named by the file's magic number: png, jpeg, webp or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


# The brands of an ISO base media file (`ftyp`) that mark an HEIC (HEVC-coded) or another HEIF image.
_HEIC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs"})
_HEIF_BRANDS = frozenset({b"mif1", b"msf1", b"heif"})


def image_media_type_sniff(*, data: bytes) -> str | None:
    """The media type the file's magic number names: the three formats above, GIF, HEIC and HEIF
    (told by the major brand of its `ftyp` box), or None."""
    fmt = image_format_sniff(data=data)
    if fmt is not None:
        return CONTENT_TYPES[fmt]
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if len(data) >= 12 and data[4:8] == b"ftyp":
        if data[8:12] in _HEIC_BRANDS:
            return "image/heic"
        if data[8:12] in _HEIF_BRANDS:
            return "image/heif"
    return None
