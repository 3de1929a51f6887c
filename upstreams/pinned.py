"""Requests to an address already checked, for the request-forgery rules of upstreams/ssrf.py.

Sent to a URL as written, a request has its host resolved again when requests connects, and a
second DNS answer (rebinding) could send it to an address never checked. Sent instead to the URL
with its host replaced by the checked address (`CheckedTarget.pinned_url`) and a Host header naming
the host, it connects exactly there. Over https the certificate must then still be verified against
the host's name, and the name sent as SNI, not the address: `PinnedHTTPAdapter` does that through
requests' public `build_connection_pool_key_attributes` (requests >= 2.32) and urllib3's
`server_hostname` and `assert_hostname` pool arguments, which also key the pool (one pool per name).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util import parse_url


class PinnedHTTPAdapter(HTTPAdapter):
    """requests' adapter, verifying an https request sent to an IP literal with a Host header that
    names a host (a pinned URL) against that host's name, and sending the name as SNI. Any other
    request is sent as HTTPAdapter sends it."""

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: bool | str, cert: Any = None
    ) -> Any:  # requests' stubs type the pool arguments without these two urllib3 ones
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        name = pinned_host_name(request=request)
        if name is None or host_params["scheme"] != "https":
            return host_params, pool_kwargs
        return host_params, {**pool_kwargs, "server_hostname": name, "assert_hostname": name}


def pinned_host_name(*, request: requests.PreparedRequest) -> str | None:
    """The host name a request to an IP literal was pinned for (its Host header's, without the port);
    None when its URL names a host, or its Host header is absent or an address itself."""
    url_host = (parse_url(request.url or "").host or "").strip("[]")
    header = request.headers.get("Host", "")
    if not header or not _is_address(url_host):
        return None
    name = header.rsplit(":", 1)[0] if not header.endswith("]") else header
    if _is_address(name.strip("[]")):
        return None
    return name


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
