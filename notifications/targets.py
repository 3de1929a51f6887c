"""Where a webhook may point: the request-forgery rules of every request the gateway makes to a URL
it did not choose (upstreams/ssrf.py, as image links are fetched). An https URL whose host resolves
to globally routable addresses only, or to the operator's own networks
(GATEWAY_FETCH_PRIVATE_NETWORKS); plain http only to those networks (a receiver on the operator's
network, or the tests' local receiver)."""

from __future__ import annotations

from django.conf import settings

from notifications.errors import AlertSettingsInvalid
from upstreams.errors import UrlRefused
from upstreams.ssrf import Origin, host_addresses_resolve, url_target_check


def webhook_target_check(*, url: str) -> Origin:
    """The URL's origin when a webhook may be sent there; UrlRefused saying why not. Checked when the
    URL is set and again before every delivery (a host's addresses can change)."""
    origin = url_target_check(url=url)
    if origin.scheme != "https":
        networks = settings.GATEWAY_FETCH_PRIVATE_NETWORKS
        addresses = host_addresses_resolve(origin=origin)
        if not networks or not all(any(a in network for network in networks) for a in addresses):
            raise UrlRefused("a webhook URL must be https")
    return origin


def webhook_url_clean(*, url: str) -> str:
    """A webhook URL as set by its owner (console, admin): "" clears it; AlertSettingsInvalid when the
    rules refuse it."""
    url = url.strip()
    if not url:
        return ""
    try:
        webhook_target_check(url=url)
    except UrlRefused as refused:
        raise AlertSettingsInvalid(
            f"This webhook URL is refused: {refused.message}.", param="webhook_url"
        ) from None
    return url
