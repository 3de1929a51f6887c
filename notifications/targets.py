"""Where a webhook may point: the request-forgery rules of every request the gateway makes to a URL
it did not choose (upstreams/ssrf.py, as image links are fetched). An https URL whose host resolves
to globally routable addresses only, or to the operator's own networks
(GATEWAY_FETCH_PRIVATE_NETWORKS); plain http only to those networks (a receiver on the operator's
network, or the tests' local receiver)."""

from __future__ import annotations

from django.conf import settings

from notifications.errors import AlertSettingsInvalid
from upstreams.errors import UrlRefused
from upstreams.ssrf import CheckedTarget, url_target_resolve


def webhook_target_check(*, url: str) -> CheckedTarget:
    """The URL and the addresses checked when a webhook may be sent there (the delivery goes to one
    of them, `CheckedTarget.pinned_url`); UrlRefused saying why not. Checked when the URL is set and
    again before every delivery (a host's addresses can change)."""
    target = url_target_resolve(url=url)
    if target.origin.scheme != "https":
        networks = settings.GATEWAY_FETCH_PRIVATE_NETWORKS
        if not networks or not all(any(a in network for network in networks) for a in target.addresses):
            raise UrlRefused("a webhook URL must be https")
    return target


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
