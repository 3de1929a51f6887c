"""Hosted results and upstream image downloads: the two conversions between `url` and `b64_json`.

- `hosted_image_store` keeps an image in Django's default storage and returns a signed link under
  GATEWAY_PUBLIC_URL that expires after GATEWAY_IMAGE_URL_TTL_SECONDS; `purge_images` deletes the
  stored images after GATEWAY_IMAGE_RETENTION_HOURS.
- `image_fetch` downloads an image an upstream answered by URL, only from that upstream's own host,
  with a size cap and a time limit, refusing private addresses unless the upstream itself lives there.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from django.conf import settings
from django.core import signing
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.urls import get_script_prefix, reverse
from django.utils import timezone

from core.errors import NotFound, PermissionDenied
from images.models import HostedImage
from upstreams.errors import UpstreamError, UrlRefused
from upstreams.imageformats import CONTENT_TYPES, image_format_sniff
from upstreams.ssrf import (
    base_url_origin,
    origin_is_private,
    peer_address_check,
    url_origin,
    url_target_check,
)
from upstreams.transport import UpstreamReply, upstream_request

if TYPE_CHECKING:
    from upstreams.snapshots import UpstreamSnapshot

logger = logging.getLogger("gateway.images")

SIGNING_SALT = "images.hosted-image"
STORAGE_PREFIX = "hosted-images"
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}
MAX_REDIRECTS = 3
FETCH_CHUNK_BYTES = 64 * 1024


# --- hosted images ------------------------------------------------------------------------------------


def hosted_image_store(*, data: bytes, content_type: str) -> str:
    """Store an image and return its signed, expiring, absolute URL under GATEWAY_PUBLIC_URL."""
    extension = EXTENSIONS.get(content_type)
    if extension is None:
        raise ValueError(f"cannot host content type {content_type!r}; expected one of {sorted(EXTENSIONS)}")
    public_id = uuid.uuid4()
    now = timezone.now()
    name = f"{STORAGE_PREFIX}/{now:%Y/%m/%d}/{public_id.hex}.{extension}"
    # The row comes first, so purge_images can find the file even if this process dies mid-way.
    image = HostedImage.objects.create(
        public_id=public_id,
        storage_name=name,
        content_type=content_type,
        size_bytes=len(data),
        created_at=now,
    )
    try:
        stored_name = default_storage.save(name, ContentFile(data))
    except Exception:
        image.delete()
        raise
    if stored_name != name:  # a storage may adjust the name it was given
        image.storage_name = stored_name
        image.save(update_fields=["storage_name"])
    return hosted_image_url(public_id=public_id)


def hosted_image_url(*, public_id: uuid.UUID, ttl_seconds: int | None = None) -> str:
    """The signed link to a hosted image; it carries its own expiry, so changing the TTL setting later
    does not extend or shorten links already handed out."""
    path = hosted_image_path(public_id=public_id, ttl_seconds=ttl_seconds)
    # reverse() includes the script prefix of the current request; GATEWAY_PUBLIC_URL already has it.
    return f"{settings.GATEWAY_PUBLIC_URL}/{path.removeprefix(get_script_prefix())}"


def hosted_image_path(*, public_id: uuid.UUID, ttl_seconds: int | None = None) -> str:
    """The signed link's path on this site (for the gateway's own pages, e.g. the console's)."""
    ttl = settings.GATEWAY_IMAGE_URL_TTL_SECONDS if ttl_seconds is None else ttl_seconds
    expires = int(time.time()) + ttl
    token = signing.Signer(salt=SIGNING_SALT).sign(f"{public_id.hex}.{expires}")
    return reverse("images_files:hosted-image", kwargs={"token": token})


def hosted_image_public_id(*, url: str) -> uuid.UUID | None:
    """The hosted image a link of `hosted_image_url` points to, whether or not it has expired; None for
    any other URL (an upstream's own, or a link whose signature does not match)."""
    prefix = hosted_image_url(public_id=uuid.UUID(int=0)).rsplit("/", 1)[0] + "/"
    if not url.startswith(prefix):
        return None
    try:
        value = signing.Signer(salt=SIGNING_SALT).unsign(url.removeprefix(prefix))
        return uuid.UUID(hex=value.partition(".")[0])
    except (signing.BadSignature, ValueError):
        return None


@dataclass(frozen=True)
class ResolvedHostedImage:
    image: HostedImage
    seconds_left: int


def hosted_image_resolve(*, token: str) -> ResolvedHostedImage:
    """The hosted image a link points to; 403 when the signature is wrong or expired, 404 when purged."""
    try:
        value = signing.Signer(salt=SIGNING_SALT).unsign(token)
    except signing.BadSignature:
        raise PermissionDenied(
            "This image link is invalid: its signature does not match.", code="invalid_signature"
        ) from None
    public_hex, _, expires_text = value.partition(".")
    try:
        public_id = uuid.UUID(hex=public_hex)
        expires = int(expires_text)
    except ValueError:
        raise PermissionDenied("This image link is invalid.", code="invalid_signature") from None
    seconds_left = expires - int(time.time())
    if seconds_left <= 0:
        raise PermissionDenied(
            "This image link has expired; request the image again for a new link.", code="expired_url"
        )
    image = HostedImage.objects.filter(public_id=public_id).first()
    if image is None:
        raise NotFound("This image is no longer stored.", code="image_not_found")
    return ResolvedHostedImage(image=image, seconds_left=seconds_left)


def hosted_images_purge(*, older_than: timedelta, batch_size: int = 500) -> int:
    """Delete hosted images (file, then row) created before now - `older_than`, in batches.

    A file the storage fails to delete keeps its row, so the next run retries it. Returns the count."""
    cutoff = timezone.now() - older_than
    deleted = 0
    last_pk = 0
    while True:
        batch = list(
            HostedImage.objects.filter(created_at__lt=cutoff, pk__gt=last_pk)
            .order_by("pk")
            .values_list("pk", "storage_name")[:batch_size]
        )
        if not batch:
            return deleted
        last_pk = batch[-1][0]
        removed = []
        for pk, name in batch:
            try:
                default_storage.delete(name)
            except Exception:  # any storage backend error: keep the row and go on with the others
                logger.exception("could not delete hosted image %s; will retry on the next purge", name)
                continue
            removed.append(pk)
        HostedImage.objects.filter(pk__in=removed).delete()
        deleted += len(removed)


# --- downloading an upstream's image -------------------------------------------------------------------


def image_fetch(*, url: str, upstream: UpstreamSnapshot) -> bytes:
    """Download an image an upstream answered by URL. Raises UpstreamError (the upstream's fault).

    Only the upstream's own scheme, host and port are accepted, at every redirect hop (followed here,
    never by requests), under the request-forgery rules of upstreams/ssrf.py: addresses that are not
    globally routable are refused unless the upstream's own host resolves to such an address (a
    provider on the local network). The body is capped at GATEWAY_FETCH_MAX_BYTES and the whole
    download at GATEWAY_FETCH_TIMEOUT_SECONDS; it must be a PNG, JPEG or WebP by its bytes. No
    credentials are sent. The GET goes through the upstream's own transport (and proxy) to its host
    as resolved when connecting: a second DNS answer is caught by the peer check, after the GET was
    sent (unlike url_fetch, it is not pinned to the address checked).
    """
    origin = base_url_origin(upstream.base_url)
    if origin is None:
        raise _fetch_error("upstream has no base URL to fetch images from", url=url)
    private_ok = origin_is_private(origin=origin)
    deadline = time.monotonic() + settings.GATEWAY_FETCH_TIMEOUT_SECONDS
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        if url_origin(current) != origin:
            raise _fetch_error("image URL is not on the upstream's own host", url=url)
        try:
            url_target_check(url=current, private_ok=private_ok)
        except UrlRefused as refused:
            raise _fetch_error(f"image download refused: {refused.message}", url=url) from None
        with upstream_request(
            upstream=upstream,
            method="GET",
            url=current,
            deadline=deadline,
            stream=True,
            headers={"Accept": "image/*"},
        ) as reply:
            try:
                peer_address_check(
                    peer=None if reply.proxied else reply.peer, port=origin.port, private_ok=private_ok
                )
            except UrlRefused as refused:
                raise _fetch_error(f"image download refused: {refused.message}", url=url) from None
            if reply.is_redirect:
                try:
                    current = urljoin(current, reply.headers.get("Location", ""))
                except ValueError:  # urllib's parser refuses it (an unbalanced "[" of an IPv6 host)
                    raise _fetch_error("image download redirected to an unreadable URL", url=url) from None
                continue
            if reply.status != 200:
                raise _fetch_error(f"image download answered HTTP {reply.status}", url=url)
            return _body_read(reply=reply, deadline=deadline, url=url)
    raise _fetch_error(f"image download redirected more than {MAX_REDIRECTS} times", url=url)


def upstream_is_private(*, upstream: UpstreamSnapshot) -> bool:
    """True when the upstream lives on a non-public address (its image URLs are useless to callers)."""
    origin = base_url_origin(upstream.base_url)
    return origin is not None and origin_is_private(origin=origin)


def _body_read(*, reply: UpstreamReply, deadline: float, url: str) -> bytes:
    cap = settings.GATEWAY_FETCH_MAX_BYTES
    declared = reply.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _fetch_error(f"image is larger than {cap} bytes", url=url)
    chunks: list[bytes] = []
    total = 0
    pieces = reply.chunks(FETCH_CHUNK_BYTES)
    while True:
        try:
            chunk = next(pieces, None)
        except UpstreamError as exc:
            raise _fetch_error(f"image download failed: {exc.message}", url=url) from exc
        if chunk is None:
            break
        total += len(chunk)
        if total > cap:
            raise _fetch_error(f"image is larger than {cap} bytes", url=url)
        if time.monotonic() > deadline:
            raise UpstreamError("image download timed out", status=504, retryable=False, sent=True)
        chunks.append(chunk)
    data = b"".join(chunks)
    if image_format_sniff(data=data) not in CONTENT_TYPES:
        raise _fetch_error("downloaded file is not a PNG, JPEG or WebP image", url=url)
    return data


def _fetch_error(reason: str, *, url: str) -> UpstreamError:
    # The URL goes to the log only (without its query, which may hold a signature); callers get a
    # generic 502 from upstream_error_to_api_error.
    logger.warning("refused or failed to fetch an upstream image (%s): %s", reason, url.split("?", 1)[0])
    return UpstreamError(reason, status=502, retryable=False, sent=True)
