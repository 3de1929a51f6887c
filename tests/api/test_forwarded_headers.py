"""X-Forwarded-For/-Proto/-Host are believed only from a proxy in GATEWAY_TRUSTED_PROXIES
(api.middleware.ForwardedHeadersMiddleware); tests/deploy/test_proxy.py shows the same through nginx."""

from __future__ import annotations

import ipaddress
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import reverse

from api.middleware import ForwardedHeadersMiddleware
from gateway_project.env import env_networks

PROXY = "10.0.0.2"
TRUSTED = (ipaddress.ip_network("10.0.0.0/29"), ipaddress.ip_network("fd00::/64"))


@pytest.fixture
def behind_proxy(settings):
    settings.GATEWAY_TRUSTED_PROXIES = TRUSTED
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.USE_X_FORWARDED_HOST = True
    settings.ALLOWED_HOSTS = ["gateway.example.com", "testserver"]


def seen(peer: str, **headers: str):
    """The request as the view after the middleware sees it."""
    request = RequestFactory().get("/console/", REMOTE_ADDR=peer, **headers)
    ForwardedHeadersMiddleware(lambda r: HttpResponse())(request)
    return request


@pytest.mark.parametrize(
    ("forwarded_for", "client"),
    [
        ("198.51.100.7", "198.51.100.7"),
        # The client wrote the first entry itself; the proxy appended what it saw.
        ("1.2.3.4, 198.51.100.7", "198.51.100.7"),
        # Two trusted proxies in a row (a load balancer, then nginx): both skipped.
        ("198.51.100.7, 10.0.0.3", "198.51.100.7"),
        ("2001:db8::7", "2001:db8::7"),
        # Garbage where an address should be: the last good hop is the client.
        ("198.51.100.7, unknown", PROXY),
    ],
)
def test_it_takes_the_clients_address_from_a_trusted_proxy(behind_proxy, forwarded_for, client):
    request = seen(PROXY, HTTP_X_FORWARDED_FOR=forwarded_for)
    assert request.META["REMOTE_ADDR"] == client


def test_it_believes_the_scheme_and_host_from_a_trusted_proxy(behind_proxy):
    request = seen(PROXY, HTTP_X_FORWARDED_PROTO="https", HTTP_X_FORWARDED_HOST="gateway.example.com")
    assert request.is_secure()
    assert request.get_host() == "gateway.example.com"


def test_it_drops_every_forwarded_header_from_any_other_peer(behind_proxy):
    request = seen(
        "198.51.100.9",
        HTTP_X_FORWARDED_FOR="10.0.0.1",
        HTTP_X_FORWARDED_PROTO="https",
        HTTP_X_FORWARDED_HOST="evil.example.com",
    )
    assert request.META["REMOTE_ADDR"] == "198.51.100.9"
    assert not request.is_secure()
    assert request.get_host() == "testserver"
    assert not {"HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO"} & set(request.META)


def test_it_trusts_no_proxy_by_default(settings):
    assert settings.GATEWAY_TRUSTED_PROXIES == ()
    request = seen("127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.7", HTTP_X_FORWARDED_PROTO="https")
    assert request.META["REMOTE_ADDR"] == "127.0.0.1"
    assert not request.is_secure()


@pytest.mark.django_db
def test_the_sign_in_throttle_counts_each_client_behind_the_proxy_apart(client, behind_proxy, settings):
    settings.GATEWAY_SIGNIN_FAILURES_PER_ADDRESS = 2
    settings.GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT = 100
    number = uuid.uuid4().int  # fresh addresses: the counts live in the cache (Redis keeps them)
    first, second = (f"198.51.{number % 250}.{number // 250 % 250 + index}" for index in (1, 2))

    def sign_in(forwarded_for: str):
        form = {"username": f"nobody-{uuid.uuid4().hex}", "password": "wrong"}
        return client.post(reverse("login"), form, REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded_for)

    assert [sign_in(first).status_code for _ in range(3)] == [200, 200, 429]
    # Another client behind the same proxy is not throttled, nor can the first pose as someone else.
    assert sign_in(second).status_code == 200
    assert sign_in(f"{second}, {first}").status_code == 429


def test_it_reads_trusted_proxies_strictly(monkeypatch):
    monkeypatch.setenv("X_PROXIES", "10.0.0.1, 10.1.0.0/16 ,::1")
    assert [str(n) for n in env_networks("X_PROXIES")] == ["10.0.0.1/32", "10.1.0.0/16", "::1/128"]
    monkeypatch.setenv("X_PROXIES", "10.0.0.1/16")
    with pytest.raises(ImproperlyConfigured, match="X_PROXIES"):
        env_networks("X_PROXIES")
