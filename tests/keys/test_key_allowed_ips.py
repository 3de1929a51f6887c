"""A key's `allowed_ips`: a call from an address in none of its networks is 403 `ip_not_allowed` on
every endpoint the key authenticates, before anything is reserved. The address is the peer's, or
behind a proxy in GATEWAY_TRUSTED_PROXIES the client's from X-Forwarded-For (from any other peer the
header is ignored)."""

from __future__ import annotations

import ipaddress

import pytest

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from keys.services import ApiKeyLimitsInput, api_key_create, api_key_limits_set
from tests.keys.admission import ENDPOINTS, IMAGE_MODEL, TEXT_MODEL, admission_models_make, error_of
from tests.keys.conftest import bearer

pytestmark = pytest.mark.django_db

PROXY = "10.0.0.2"
ALLOWED, OUTSIDE = "203.0.113.9", "198.51.100.1"


@pytest.fixture
def models(alpha_group, alpha_model, demo_upstream):
    admission_models_make(group=alpha_group, upstream=demo_upstream)


@pytest.fixture
def behind_proxy(settings):
    settings.GATEWAY_TRUSTED_PROXIES = (ipaddress.ip_network("10.0.0.0/29"),)


def key_from(account, group, networks: list[str]):
    return api_key_create(
        account=account, group=group, label="office", limits=ApiKeyLimitsInput(allowed_ips=networks)
    )


def get(client, path: str, key: str, *, peer: str, forwarded_for: str | None = None, **headers: str):
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    return client.get(path, headers={**bearer(key), **headers}, REMOTE_ADDR=peer)


def assert_ip_refused(response, *, native: bool = False) -> str:
    assert response.status_code == 403, response.content
    error_type, code, message = error_of(response, native=native)
    assert (error_type, code) == ("permission_error", "ip_not_allowed")
    return message


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda endpoint: endpoint.name)
def test_a_call_from_outside_the_keys_networks_is_refused_before_anything_is_reserved(
    client, alice, alpha_group, models, endpoint
):
    _, key = key_from(alice, alpha_group, ["203.0.113.0/24"])
    model = IMAGE_MODEL if endpoint.family == "image" else TEXT_MODEL
    start = Wallet.objects.get(account=alice).balance

    refused = endpoint.call(client, key, model, REMOTE_ADDR=OUTSIDE)

    message = assert_ip_refused(refused, native=endpoint.native)
    assert OUTSIDE in message
    assert not Hold.objects.exists() and not LedgerEntry.objects.filter(kind="charge").exists()
    assert Wallet.objects.get(account=alice).balance == start
    assert not UsageRecord.objects.exists()  # refused with the credential, before any call began

    served = endpoint.call(client, key, model, REMOTE_ADDR=ALLOWED)

    assert served.status_code == 200, served.content
    assert LedgerEntry.objects.filter(kind="charge").count() == (1 if endpoint.billed else 0)


@pytest.mark.parametrize(
    "path", ["/v1/models", f"/v1/models/{TEXT_MODEL}", "/v1/me"], ids=["models", "model", "me"]
)
def test_the_model_list_and_me_are_refused_from_outside_too(client, alice, alpha_group, models, path):
    _, key = key_from(alice, alpha_group, ["203.0.113.0/24"])

    assert_ip_refused(get(client, path, key, peer=OUTSIDE))
    assert get(client, path, key, peer=ALLOWED).status_code == 200


def test_the_native_model_list_answers_in_its_own_shape(client, alice, alpha_group, models):
    _, key = key_from(alice, alpha_group, ["203.0.113.0/24"])

    response = get(client, "/v1/models", key, peer=OUTSIDE, **{"anthropic-version": "2023-06-01"})

    assert_ip_refused(response, native=True)


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "served"),
    [
        # From the trusted proxy: the client it names is the caller.
        (PROXY, ALLOWED, True),
        (PROXY, OUTSIDE, False),
        # The client wrote the first entry itself; the proxy appended what it saw.
        (PROXY, f"{ALLOWED}, {OUTSIDE}", False),
        (PROXY, f"{OUTSIDE}, {ALLOWED}", True),
        # From any other peer the header is ignored: the peer is the caller.
        (OUTSIDE, ALLOWED, False),
        (ALLOWED, OUTSIDE, True),
    ],
)
def test_behind_the_trusted_proxy_the_forwarded_client_is_the_caller(
    client, alice, alpha_group, models, behind_proxy, peer, forwarded_for, served
):
    _, key = key_from(alice, alpha_group, ["203.0.113.0/24"])

    response = get(client, "/v1/models", key, peer=peer, forwarded_for=forwarded_for)

    if served:
        assert response.status_code == 200, response.content
    else:
        assert_ip_refused(response)


def test_the_proxys_own_address_is_not_the_callers(client, alice, alpha_group, models, behind_proxy):
    """A key allowing only the proxy's network does not admit every client behind the proxy."""
    _, key = key_from(alice, alpha_group, ["10.0.0.0/29"])

    assert_ip_refused(get(client, "/v1/models", key, peer=PROXY, forwarded_for=ALLOWED))


@pytest.mark.parametrize(
    ("networks", "peer", "served"),
    [
        (["2001:db8::/32"], "2001:db8:1::5", True),
        (["2001:db8::/32"], "2001:db9::1", False),
        (["2001:db8::/32"], ALLOWED, False),
        # Single addresses, stored as /32 and /128 networks.
        (["198.51.100.7"], "198.51.100.7", True),
        (["198.51.100.7"], "198.51.100.8", False),
        (["2001:db8::1"], "2001:db8::1", True),
        (["2001:db8::1"], "2001:db8::2", False),
        # A dual-stack socket reports an IPv4 client as an IPv4-mapped IPv6 address.
        (["203.0.113.0/24"], f"::ffff:{ALLOWED}", True),
        (["203.0.113.0/24"], f"::ffff:{OUTSIDE}", False),
        # Either family in one list.
        (["2001:db8::/32", "203.0.113.0/24"], ALLOWED, True),
    ],
)
def test_ipv6_and_single_address_networks(client, alice, alpha_group, models, networks, peer, served):
    _, key = key_from(alice, alpha_group, networks)

    response = get(client, "/v1/models", key, peer=peer)

    if served:
        assert response.status_code == 200, response.content
    else:
        assert_ip_refused(response)


def test_an_ipv6_client_behind_the_trusted_proxy(client, alice, alpha_group, models, settings):
    settings.GATEWAY_TRUSTED_PROXIES = (ipaddress.ip_network("fd00::/64"),)
    _, key = key_from(alice, alpha_group, ["2001:db8::/32"])

    assert get(client, "/v1/models", key, peer="fd00::2", forwarded_for="2001:db8::7").status_code == 200
    assert_ip_refused(get(client, "/v1/models", key, peer="fd00::2", forwarded_for="2001:db9::7"))


def test_a_key_without_networks_is_served_from_anywhere(client, alice, alpha_group, models):
    _, key = key_from(alice, alpha_group, [])

    for peer in (ALLOWED, OUTSIDE, "2001:db8::1"):
        assert get(client, "/v1/models", key, peer=peer).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_changed_networks_apply_from_the_next_call(client, alice, alpha_group, models):
    api_key, key = key_from(alice, alpha_group, ["203.0.113.0/24"])
    assert_ip_refused(get(client, "/v1/me", key, peer=OUTSIDE))

    api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput(allowed_ips=["198.51.100.0/24"]))

    assert get(client, "/v1/me", key, peer=OUTSIDE).status_code == 200
    assert_ip_refused(get(client, "/v1/me", key, peer=ALLOWED))

    api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput())

    assert get(client, "/v1/me", key, peer=ALLOWED).status_code == 200
