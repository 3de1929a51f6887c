"""The rules for the gateway's HTTP requests to a URL it did not choose (server-side request forgery):
an image an upstream answered by link, an image a caller gave by link, a notification's target.

A URL is taken only in the one form every URL parser reads alike (`url_origin`), and a host only
when every address it resolves to may be reached (`url_target_check`): globally routable, or inside
`GATEWAY_FETCH_PRIVATE_NETWORKS` (the operator's own private networks; none by default), or anywhere
when the caller says a private address is fine (an upstream that itself lives on one).

A request sent to the URL as written would have its host resolved again when connecting, and a
second DNS answer (rebinding) could then send it to an address never checked. So a request goes to
the address that was checked (`url_target_resolve`, `CheckedTarget.pinned_url`), its Host header
naming the URL's host, and over TLS the certificate is verified against that host, sent as SNI
(upstreams/pinned.py): no second lookup happens, and a second DNS answer cannot send the request
elsewhere. The address actually connected to is checked again (`peer_address_check`), a second
line that also covers a request sent some other way. Redirects are followed by the caller, each hop
checked as a new URL. Every refusal is an `UrlRefused`, which says why.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import NamedTuple
from urllib.parse import urlsplit

from django.conf import settings
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from upstreams.errors import UrlRefused

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# What no canonical URL holds: controls, whitespace, a backslash (WHATWG reads it as "/", RFC 3986
# parsers as data), anything beyond ASCII.
_UNSAFE_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\]|[^\x00-\x7f]")
# scheme://authority, the authority ending at the first "/", "?" or "#" as every parser ends it.
_AUTHORITY = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#]*)")
_HOST_PORT = re.compile(
    r"(?P<host>[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])"
    r"(?::(?P<port>[1-9][0-9]{0,4}))?"
)


class Origin(NamedTuple):
    """A URL's scheme, host (an IPv6 literal in brackets) and port (the default one filled in)."""

    scheme: str
    host: str
    port: int


def url_origin(url: str) -> Origin | None:
    """The origin of a URL written in the one form every URL parser reads alike, else None.

    The host checked must be the host connected to: requests connects where urllib3's `parse_url`
    says, which reads `http://a:1\\@b:2/` as host a port 1 where `urlsplit` reads b port 2. So a URL
    is taken only when it is canonical (http or https, lowercase scheme and host, no userinfo, no
    percent-encoding, backslash, control or whitespace character, no trailing dot, an IP literal only
    in its standard form, a port without leading zeros) and urllib3 and urlsplit agree on its scheme,
    host and port.
    """
    if _UNSAFE_CHARACTERS.search(url):
        return None
    written = _AUTHORITY.match(url)
    if written is None:
        return None
    host_port = _HOST_PORT.fullmatch(written["authority"])
    if host_port is None:  # userinfo ("@"), "%", uppercase, an empty host, ...
        return None
    scheme, host = written["scheme"], host_port["host"]
    port = int(host_port["port"]) if host_port["port"] else (443 if scheme == "https" else 80)
    if port > 65535 or not _host_is_canonical(host):
        return None
    try:
        by_urllib3 = parse_url(url)
        by_urlsplit = urlsplit(url)
        urlsplit_port = by_urlsplit.port
    except (LocationParseError, ValueError):
        return None
    if (
        by_urllib3.auth is not None
        or (by_urllib3.scheme, by_urllib3.host, by_urllib3.port or port) != (scheme, host, port)
        or (by_urlsplit.scheme, by_urlsplit.hostname, urlsplit_port or port)
        != (scheme, host.strip("[]"), port)
    ):
        return None
    return Origin(scheme, host, port)


def base_url_origin(url: str) -> Origin | None:
    """The origin of an operator's base URL (an upstream's), read leniently as the operator wrote it;
    None when it is not http(s)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return Origin(parts.scheme, host, port or (443 if parts.scheme == "https" else 80))


def host_addresses_resolve(*, origin: Origin) -> list[Address]:
    """Every address the origin's host resolves to; UrlRefused when it does not resolve."""
    try:
        infos = socket.getaddrinfo(origin.host.strip("[]"), origin.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UrlRefused(f"cannot resolve the host {origin.host}: {exc}") from exc
    return [_plain(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])) for info in infos]


def address_allowed(*, address: Address, private_ok: bool = False) -> bool:
    """Whether an address may be connected to: a globally routable one, one of the operator's
    GATEWAY_FETCH_PRIVATE_NETWORKS, or any when `private_ok`."""
    address = _plain(address)
    if private_ok or address.is_global:
        return True
    return any(address in network for network in settings.GATEWAY_FETCH_PRIVATE_NETWORKS)


def origin_is_private(*, origin: Origin) -> bool:
    """True when the host does not resolve to public addresses only (or does not resolve at all)."""
    try:
        addresses = host_addresses_resolve(origin=origin)
    except UrlRefused:
        return True
    return not addresses or not all(_plain(address).is_global for address in addresses)


class CheckedTarget(NamedTuple):
    """A URL the gateway may request (`url_target_resolve`): its origin and every address its host
    resolved to when checked, all of them allowed."""

    url: str
    origin: Origin
    addresses: tuple[Address, ...]

    @property
    def pinned_urls(self) -> tuple[str, ...]:
        """The URL with its host replaced by each address checked, in the resolver's order (an IPv6
        one in brackets), its port written out: a request to one connects there without resolving
        the host again. When one cannot be connected to, the next may be tried (nothing was sent)."""
        written = _AUTHORITY.match(self.url)
        assert written is not None  # a canonical URL (url_origin) always starts so
        rest = self.url[written.end() :]
        literals = (f"[{a}]" if a.version == 6 else str(a) for a in self.addresses)
        return tuple(f"{self.origin.scheme}://{literal}:{self.origin.port}{rest}" for literal in literals)

    @property
    def pinned_url(self) -> str:
        """The URL pinned to the first address checked (`pinned_urls`)."""
        return self.pinned_urls[0]

    @property
    def host_header(self) -> str:
        """The Host header the URL as written would send: its host, and its port unless the scheme's
        default one."""
        default = 443 if self.origin.scheme == "https" else 80
        host = self.origin.host
        return host if self.origin.port == default else f"{host}:{self.origin.port}"


def url_target_resolve(*, url: str, private_ok: bool = False) -> CheckedTarget:
    """A URL the gateway may request: canonical (`url_origin`), and its host resolving only to
    addresses it may connect to (`address_allowed`), with those addresses, to connect to one of them
    (`CheckedTarget.pinned_url`) rather than resolve the host again. Raises UrlRefused."""
    origin = url_origin(url)
    if origin is None:
        raise UrlRefused("the URL is not a plain http(s) URL in canonical form")
    addresses = host_addresses_resolve(origin=origin)
    if not addresses or not all(address_allowed(address=a, private_ok=private_ok) for a in addresses):
        raise UrlRefused("the URL's host resolves to a non-public address")
    return CheckedTarget(url=url, origin=origin, addresses=tuple(addresses))


def url_target_check(*, url: str, private_ok: bool = False) -> Origin:
    """The origin of a URL the gateway may request (`url_target_resolve`). Raises UrlRefused."""
    return url_target_resolve(url=url, private_ok=private_ok).origin


def peer_address_check(*, peer: tuple[str, int] | None, port: int, private_ok: bool = False) -> None:
    """The server actually connected to (`peer`, None when unknown or behind a proxy) is on the URL's
    port and at an address that may be connected to. A request sent to a pinned URL cannot have gone
    elsewhere; this second line refuses the answer of one that was not (or of a pinned address that
    is no longer allowed), but only once the request has been delivered. Raises UrlRefused."""
    if peer is None:
        return
    if peer[1] != port:
        raise UrlRefused("the connection went to another port than the URL's")
    if not address_allowed(address=ipaddress.ip_address(peer[0].split("%", 1)[0]), private_ok=private_ok):
        raise UrlRefused("the URL's host resolves to a non-public address")


def _host_is_canonical(host: str) -> bool:
    """An IP literal in its standard form (no decimal, octal or hex IPv4, IPv6 compressed), or a name
    that cannot be read as an IPv4 address."""
    if host.startswith("["):
        try:
            return str(ipaddress.IPv6Address(host[1:-1])) == host[1:-1]
        except ValueError:
            return False
    last_label = host.rsplit(".", 1)[-1]
    if last_label.isdigit() or last_label.startswith("0x"):
        try:
            return str(ipaddress.IPv4Address(host)) == host
        except ValueError:
            return False
    return True


def _plain(address: Address) -> Address:
    """An IPv4-mapped IPv6 address as the IPv4 address it stands for."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
