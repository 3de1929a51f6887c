"""The request-forgery rules (upstreams/ssrf.py) as any caller of them sees them: which addresses may be
connected to, with and without the operator's private networks; URLs refused before any lookup; the
peer of a connection checked again. (Their use for an upstream's image links: tests/images/test_hosting.py;
for a caller's image links: tests/chat/test_gemini_image_links.py.)"""

from __future__ import annotations

import ipaddress

import pytest

from upstreams.errors import UrlRefused
from upstreams.ssrf import address_allowed, peer_address_check, url_origin, url_target_check


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("93.184.215.14", True),
        ("2606:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.9", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),  # noqa: S104 (an address checked, not bound)
        ("::1", False),
        ("fe80::1", False),
        ("fd00::1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:93.184.215.14", True),
    ],
)
def test_only_globally_routable_addresses_are_allowed_by_default(address, allowed):
    assert address_allowed(address=ipaddress.ip_address(address)) is allowed
    assert address_allowed(address=ipaddress.ip_address(address), private_ok=True) is True


def test_the_operators_private_networks_are_allowed_and_no_other(settings):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ipaddress.ip_network("10.20.0.0/16"),)

    assert address_allowed(address=ipaddress.ip_address("10.20.5.6"))
    assert address_allowed(address=ipaddress.ip_address("::ffff:10.20.5.6"))
    assert not address_allowed(address=ipaddress.ip_address("10.21.0.1"))
    assert not address_allowed(address=ipaddress.ip_address("127.0.0.1"))


@pytest.mark.parametrize(
    "url",
    [
        "ftp://93.184.215.14/a.png",
        "file:///etc/passwd",
        "http://2130706433/a.png",
        "http://0x7f.0.0.1/a.png",
        "http://user@93.184.215.14/a.png",
        "http://93.184.215.14\\@127.0.0.1/a.png",
        "HTTP://93.184.215.14/a.png",
    ],
)
def test_a_url_not_in_canonical_form_is_refused_before_any_lookup(url):
    assert url_origin(url) is None
    with pytest.raises(UrlRefused, match="canonical form"):
        url_target_check(url=url)


def test_a_literal_private_address_is_refused_and_a_public_one_taken():
    with pytest.raises(UrlRefused, match="non-public"):
        url_target_check(url="http://127.0.0.1:8080/a.png")
    assert url_target_check(url="https://93.184.215.14/a.png") == ("https", "93.184.215.14", 443)


def test_the_peer_connected_to_is_checked_again():
    peer_address_check(peer=("93.184.215.14", 443), port=443)
    peer_address_check(peer=None, port=443)  # unknown (a proxy's, or no socket): the lookup's check stands
    with pytest.raises(UrlRefused, match="non-public"):
        peer_address_check(peer=("127.0.0.1", 443), port=443)
    with pytest.raises(UrlRefused, match="another port"):
        peer_address_check(peer=("93.184.215.14", 8443), port=443)
