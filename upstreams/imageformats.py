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
