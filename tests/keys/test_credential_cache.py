"""The per-process credential cache (keys/selectors.py): a repeated key or token costs no database
query, and every change that can alter an authentication answer is seen by the very next request of a
process that had the credential cached.

The Django test client serves requests in this process, so its cache is the one the requests warm;
tests are transactional, so writes commit and their invalidations run as in production. The cache is
on only with REDIS_URL (the shared generation counter); the tests that need it are skipped without.
"""

from __future__ import annotations

import json
import time
from dataclasses import FrozenInstanceError
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, RefreshToken, set_token_value

from accounts.models import User
from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import LedgerEntry, UsageRecord, Wallet
from core.config_cache import GENERATION_KEY
from keys.authentication import credential_verify
from keys.errors import CredentialExpired
from keys.models import ApiKey
from keys.secrets import api_key_generate, oauth_access_token_generate, oauth_refresh_token_generate
from keys.selectors import LastUsedMark
from keys.services import (
    api_key_create,
    api_key_mark_used,
    api_key_revoke,
    oauth_application_revoke_for_user,
    oauth_token_create,
    oauth_token_revoke,
)
from tests.keys.conftest import assert_compatible_error, bearer

pytestmark = pytest.mark.django_db(transaction=True)

needs_cache = pytest.mark.skipif(
    not settings.REDIS_URL,
    reason="the credential cache is on only with REDIS_URL (its shared generation counter); without "
    "it every request queries (test_it_queries_every_request_without_redis)",
)

CREDENTIAL_TABLES = ('"keys_apikey"', '"oauth2_provider_accesstoken"')


def credential_statements(captured: CaptureQueriesContext) -> list[str]:
    """The statements that read or wrote a key or token row (the lookup, last_used_at)."""
    return [q["sql"] for q in captured.captured_queries if any(t in q["sql"] for t in CREDENTIAL_TABLES)]


def get(client, path: str, secret: str):
    return client.get(path, headers=bearer(secret))


def get_counting(client, path: str, secret: str):
    """The response, and the credential statements the request made."""
    with CaptureQueriesContext(connection) as captured:
        response = get(client, path, secret)
    return response, credential_statements(captured)


def warm(client, path: str, secret: str) -> None:
    """Serve the credential twice: the second request must come from the cache (no credential query)."""
    assert get(client, path, secret).status_code == 200
    response, statements = get_counting(client, path, secret)
    assert response.status_code == 200, response.content[:500]
    assert statements == []


def model_ids(response) -> list[str]:
    assert response.status_code == 200, response.content[:500]
    return [item["id"] for item in response.json()["data"]]


def generation() -> int | None:
    value = cache.get(GENERATION_KEY)
    return int(value) if value is not None else None


@pytest.fixture
def sketchbook(db) -> Application:
    return Application.objects.create(
        name="Sketchbook",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="https://app.example/callback",
    )


def grant(account, application: Application, *, scope: str) -> tuple[AccessToken, str]:
    """What the authorization-code flow leaves behind: an access token with its refresh token."""
    secret = oauth_access_token_generate()
    access = AccessToken(
        user=account.user, application=application, scope=scope, expires=timezone.now() + timedelta(hours=1)
    )
    set_token_value(access, secret)
    access.save()
    refresh = RefreshToken(user=account.user, application=application, access_token=access)
    set_token_value(refresh, oauth_refresh_token_generate())
    refresh.save()
    return access, secret


@pytest.fixture
def sketchbook_token(alice, alpha_model, sketchbook) -> str:
    _, secret = grant(alice, sketchbook, scope="profile:read account:read models:invoke")
    return secret


# --- a repeated credential costs no query ------------------------------------------------------------


@needs_cache
def test_it_serves_a_repeated_key_without_a_credential_query(client, alice_key):
    first, first_statements = get_counting(client, "/v1/models", alice_key)
    second, second_statements = get_counting(client, "/v1/models", alice_key)

    assert model_ids(first) == model_ids(second) == ["alpha-image-2"]
    # The first request looked the key up (one joined SELECT) and recorded its use (one UPDATE).
    assert len(first_statements) == 2
    assert second_statements == []
    assert ApiKey.objects.get().last_used_at is not None


@needs_cache
def test_it_serves_a_repeated_oauth_token_without_a_credential_query(client, alice, sketchbook_token):
    first, first_statements = get_counting(client, "/v1/me", sketchbook_token)
    second, second_statements = get_counting(client, "/v1/me", sketchbook_token)

    assert first.status_code == second.status_code == 200
    assert second.json()["user"]["username"] == "alice"
    assert second.json()["credential"] == {
        "type": "oauth",
        "label": "Sketchbook",
        "scopes": ["account:read", "models:invoke", "profile:read"],
    }
    assert len(first_statements) == 1
    assert second_statements == []


@needs_cache
def test_it_authenticates_a_repeated_image_call_without_a_credential_query(client, alice, alice_key):
    body = json.dumps({"model": "alpha-image-2", "prompt": "a lighthouse", "size": "64x64"})

    def generate():
        with CaptureQueriesContext(connection) as captured:
            response = client.post(
                "/v1/images/generations",
                data=body,
                content_type="application/json",
                headers=bearer(alice_key),
            )
        return response, credential_statements(captured)

    first, first_statements = generate()
    second, second_statements = generate()

    assert first.status_code == second.status_code == 200, second.content[:500]
    assert len(first_statements) == 2  # the key's lookup and its last_used_at
    assert second_statements == []
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("9.70"), Decimal("0"))  # both calls charged once
    assert LedgerEntry.objects.filter(wallet=wallet, kind="charge").count() == 2


def test_it_queries_every_request_without_redis(client, alice_key):
    with override_settings(REDIS_URL=""):
        get(client, "/v1/models", alice_key)
        response, statements = get_counting(client, "/v1/models", alice_key)

    assert model_ids(response) == ["alpha-image-2"]
    assert len(statements) == 1 and statements[0].startswith("SELECT")


@needs_cache
@pytest.mark.parametrize("generate", [api_key_generate, oauth_access_token_generate], ids=["key", "oauth"])
def test_it_does_not_cache_an_unknown_credential(client, alice_key, generate):
    unknown = generate()

    for _ in range(2):
        response, statements = get_counting(client, "/v1/models", unknown)
        assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")
        # Looked up again every time: unknown secrets take no memory, whoever sends them.
        assert len(statements) == 1


# --- every change is seen by the next request of a process that had the credential cached ------------


def _revoke(account, api_key: ApiKey) -> None:
    api_key_revoke(api_key=api_key)


def _deactivate_user(account, api_key: ApiKey) -> None:
    user = User.objects.get(pk=account.user_id)
    user.is_active = False
    user.save()  # as the admin's user page does


def _expire(account, api_key: ApiKey) -> None:
    api_key.expires_at = timezone.now() - timedelta(seconds=1)
    api_key.save()  # as the admin's key page does


def _delete(account, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk).delete()


@needs_cache
@pytest.mark.parametrize(
    ("change", "code"),
    [
        (_revoke, "revoked_api_key"),
        (_deactivate_user, "invalid_api_key"),
        (_expire, "expired_api_key"),
        (_delete, "invalid_api_key"),
    ],
    ids=["revoked", "user_deactivated", "expired", "deleted"],
)
def test_it_refuses_a_cached_key_at_the_next_request_after_a_change(client, alice, alice_key, change, code):
    warm(client, "/v1/models", alice_key)

    change(alice, ApiKey.objects.get())
    response = get(client, "/v1/models", alice_key)

    assert_compatible_error(response, status=401, type_="authentication_error", code=code)


@needs_cache
def test_it_serves_a_cached_key_from_its_new_group_at_the_next_request(
    client, alice, alice_key, gamma_group, gamma_model
):
    alice.allowed_groups.add(gamma_group)  # a key serves only in a group its account may use
    warm(client, "/v1/models", alice_key)

    api_key = ApiKey.objects.get()
    api_key.group = gamma_group
    api_key.save(update_fields=["group"])
    response = get(client, "/v1/models", alice_key)

    assert model_ids(response) == ["gamma-image-1"]
    assert ApiKey.objects.get().group_id == gamma_group.pk


@needs_cache
def test_it_applies_a_cached_keys_expiry_by_the_clock(client, alice, alpha_group, alpha_model, key_for):
    expires_at = timezone.now() + timedelta(hours=1)
    secret = key_for(alice, alpha_group, expires_at=expires_at)
    warm(client, "/v1/models", secret)

    with CaptureQueriesContext(connection) as captured, pytest.raises(CredentialExpired) as refused:
        credential_verify(secret=secret, now=expires_at)

    assert refused.value.code == "expired_api_key"
    assert credential_statements(captured) == []  # the cached key, judged by the clock
    assert credential_verify(secret=secret, now=expires_at - timedelta(seconds=1)).kind == "api_key"


def _revoke_token(account, token_pk: int) -> None:
    assert oauth_token_revoke(access_token=AccessToken.objects.get(pk=token_pk)) is True


def _revoke_application(account, token_pk: int) -> None:
    application_id = AccessToken.objects.get(pk=token_pk).application_id
    assert oauth_application_revoke_for_user(user_id=account.user_id, application_id=application_id) == 1


def _delete_application(account, token_pk: int) -> None:
    Application.objects.get(accesstoken__pk=token_pk).delete()


def _deactivate_token_user(account, token_pk: int) -> None:
    user = User.objects.get(pk=account.user_id)
    user.is_active = False
    user.save(update_fields=["is_active"])


@needs_cache
@pytest.mark.parametrize(
    "change",
    [_revoke_token, _revoke_application, _delete_application, _deactivate_token_user],
    ids=["token_revoked", "application_revoked_for_user", "application_deleted", "user_deactivated"],
)
def test_it_refuses_a_cached_oauth_token_at_the_next_request_after_a_change(
    client, alice, sketchbook_token, change
):
    warm(client, "/v1/me", sketchbook_token)

    change(alice, AccessToken.objects.get().pk)
    response = get(client, "/v1/me", sketchbook_token)

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")


@needs_cache
def test_it_serves_a_cached_oauth_token_from_the_accounts_new_current_group(
    client, alice, sketchbook_token, alpha_group, gamma_group, gamma_model
):
    account_set_groups(account=alice, allowed_groups=[alpha_group, gamma_group], current_group=alpha_group)
    assert model_ids(get(client, "/v1/models", sketchbook_token)) == ["alpha-image-2"]
    warm(client, "/v1/models", sketchbook_token)

    assert account_set_groups(
        account=alice, allowed_groups=[alpha_group, gamma_group], current_group=gamma_group
    )
    response = get(client, "/v1/models", sketchbook_token)

    assert model_ids(response) == ["gamma-image-1"]


ALLOWED_GROUPS_TABLE = '"accounts_account_allowed_groups"'


@needs_cache
def test_it_checks_a_repeated_oauth_calls_group_without_a_query(client, alice, sketchbook_token):
    with CaptureQueriesContext(connection) as first_queries:
        first = get(client, "/v1/models", sketchbook_token)
    with CaptureQueriesContext(connection) as second_queries:
        second = get(client, "/v1/models", sketchbook_token)

    assert model_ids(first) == model_ids(second) == ["alpha-image-2"]
    allowed_reads = [
        [q["sql"] for q in captured.captured_queries if ALLOWED_GROUPS_TABLE in q["sql"]]
        for captured in (first_queries, second_queries)
    ]
    # Read once with the token, then served with it: the current group's check costs no query.
    assert [len(reads) for reads in allowed_reads] == [1, 0]


@needs_cache
def test_it_refuses_a_cached_oauth_token_at_the_next_request_once_its_group_is_disallowed(
    client, alice, sketchbook_token, alpha_group, gamma_group
):
    warm(client, "/v1/models", sketchbook_token)

    # An operator takes Alpha away but leaves it current.
    alice.allowed_groups.set([gamma_group])
    response = get(client, "/v1/models", sketchbook_token)

    assert_compatible_error(response, status=403, type_="permission_error", code="GROUP_NOT_ALLOWED")


@needs_cache
def test_it_lets_a_cached_oauth_token_select_a_group_allowed_since(
    client, alice, sketchbook_token, alpha_group, gamma_group, gamma_model
):
    body = {"model": f"{gamma_group.pk}:gamma-image-1", "prompt": "a lighthouse", "size": "1024x1024"}

    def generate():
        return client.post(
            "/v1/images/generations",
            data=json.dumps(body),
            content_type="application/json",
            headers=bearer(sketchbook_token),
        )

    refused = generate()
    assert refused.status_code == 403, refused.content[:500]
    assert refused.json()["error"]["code"] == "GROUP_NOT_ALLOWED"

    alice.allowed_groups.add(gamma_group)
    response = generate()

    assert response.status_code == 200, response.content[:500]
    assert UsageRecord.objects.filter(status=200, group=gamma_group).count() == 1


@needs_cache
def test_it_sees_a_narrowed_token_scope_at_the_next_request(client, alice, sketchbook_token):
    warm(client, "/v1/me", sketchbook_token)

    access = AccessToken.objects.get()
    access.scope = "account:balance:read"
    access.save(update_fields=["scope"])
    response = get(client, "/v1/me", sketchbook_token)

    assert response.status_code == 200
    assert set(response.json()) == {
        "object",
        "credential",
        "currency",
        "balance",
        "balance_held",
        "balance_available",
        "usage",
    }


@needs_cache
def test_it_applies_a_cached_tokens_expiry_by_the_clock(client, alice, alpha_model):
    access, secret = oauth_token_create(account=alice, scopes=["profile:read"], expires_in_seconds=60)
    warm(client, "/v1/me", secret)

    with CaptureQueriesContext(connection) as captured, pytest.raises(CredentialExpired) as refused:
        credential_verify(secret=secret, now=access.expires)

    assert refused.value.code == "expired_api_key"
    assert credential_statements(captured) == []


@needs_cache
def test_it_bounds_a_lost_invalidation_by_the_cache_age(client, alice_key):
    warm(client, "/v1/models", alice_key)

    # A write that bumps nothing (QuerySet.update sends no signal), as if the invalidation were lost.
    ApiKey.objects.update(revoked_at=timezone.now())
    assert get(client, "/v1/models", alice_key).status_code == 200  # this process still trusts its entry

    time.sleep(1)
    with override_settings(GATEWAY_CONFIG_CACHE_SECONDS=1):  # the entry is now older than the backstop
        response = get(client, "/v1/models", alice_key)

    assert_compatible_error(response, status=401, type_="authentication_error", code="revoked_api_key")


# --- shared entries, private instances ---------------------------------------------------------------


def test_it_hands_every_request_the_same_immutable_snapshots(alice, alice_key, alpha_group):
    first = credential_verify(secret=alice_key)
    second = credential_verify(secret=alice_key)

    assert second.account == first.account
    # Nothing a request does can change what another request reads.
    with pytest.raises(FrozenInstanceError):
        first.account.current_group = None  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        first.bound_group.name = "Renamed"  # type: ignore[misc,union-attr]
    assert second.account.current_group.pk == alpha_group.pk
    assert second.bound_group.name == "Alpha-Image"
    # What the snapshot does not hold is read by id, as it is now.
    assert wallet_balance(account_id=second.account.pk) == Decimal("10.0000")
    wallet_top_up(account=alice, amount="5.00", reference="later")
    assert wallet_balance(account_id=credential_verify(secret=alice_key).account.pk) == Decimal("15.0000")


def wallet_balance(*, account_id: int) -> Decimal:
    return Wallet.objects.get(account_id=account_id).balance


# --- last_used_at: once a minute per key, never backwards -------------------------------------------


@pytest.fixture
def alice_api_key(alice, alpha_group) -> ApiKey:
    api_key, _ = api_key_create(account=alice, group=alpha_group)
    return api_key


def test_it_waits_for_the_minute_another_process_recorded(alice_api_key, django_assert_num_queries):
    recorded = timezone.now()
    ApiKey.objects.filter(pk=alice_api_key.pk).update(last_used_at=recorded)  # by another process
    mark = LastUsedMark(None)  # this process has not seen that write

    # One losing conditional UPDATE and one SELECT to learn when; then nothing until the minute passes.
    with django_assert_num_queries(2):
        assert api_key_mark_used(api_key_id=alice_api_key.pk, last_used=mark, now=recorded) is False
    with django_assert_num_queries(0):
        for seconds in (1, 30, 59):
            moment = recorded + timedelta(seconds=seconds)
            assert api_key_mark_used(api_key_id=alice_api_key.pk, last_used=mark, now=moment) is False
    later = recorded + timedelta(seconds=61)
    with django_assert_num_queries(1):
        assert api_key_mark_used(api_key_id=alice_api_key.pk, last_used=mark, now=later) is True

    assert ApiKey.objects.get().last_used_at == later
    assert mark.value == later


def test_it_never_moves_last_used_at_backwards(alice_api_key):
    recorded = timezone.now()
    ApiKey.objects.filter(pk=alice_api_key.pk).update(last_used_at=recorded)
    mark = LastUsedMark(None)

    earlier = recorded - timedelta(minutes=5)  # a request that read the clock long before
    assert api_key_mark_used(api_key_id=alice_api_key.pk, last_used=mark, now=earlier) is False

    assert ApiKey.objects.get().last_used_at == recorded
    assert mark.value == recorded
    mark.advance(earlier)
    assert mark.value == recorded


# --- what invalidates, and what does not -------------------------------------------------------------


@needs_cache
@pytest.mark.parametrize(
    "write",
    [
        lambda ctx: api_key_revoke(api_key=ctx["api_key"]),
        lambda ctx: ctx["api_key"].save(update_fields=["label"]),
        lambda ctx: ctx["api_key"].delete(),
        lambda ctx: ctx["user"].save(update_fields=["is_active"]),
        lambda ctx: ctx["account"].save(update_fields=["current_group"]),
        lambda ctx: ctx["account"].allowed_groups.add(ctx["gamma"]),
        lambda ctx: ctx["account"].allowed_groups.remove(ctx["alpha"]),
        lambda ctx: ctx["account"].allowed_groups.clear(),
        lambda ctx: ctx["gamma"].accounts.add(ctx["account"]),
        lambda ctx: ctx["token"].save(update_fields=["scope"]),
        lambda ctx: oauth_token_revoke(access_token=ctx["token"]),
        lambda ctx: ctx["application"].save(),
        lambda ctx: ctx["application"].delete(),
    ],
    ids=[
        "key_revoked",
        "key_saved",
        "key_deleted",
        "user_saved",
        "account_saved",
        "allowed_group_added",
        "allowed_group_removed",
        "allowed_groups_cleared",
        "account_added_from_the_group_side",
        "token_saved",
        "token_revoked",
        "application_saved",
        "application_deleted",
    ],
)
def test_it_invalidates_every_process_after_a_write_that_can_change_an_answer(
    alice, alpha_group, gamma_group, sketchbook, write
):
    api_key, _ = api_key_create(account=alice, group=alpha_group)
    token, _ = grant(alice, sketchbook, scope="profile:read")
    ctx = {
        "api_key": api_key,
        "user": User.objects.get(pk=alice.user_id),
        "account": alice,
        "alpha": alpha_group,
        "gamma": gamma_group,
        "token": token,
        "application": sketchbook,
    }
    before = generation()

    write(ctx)

    assert generation() is not None and generation() > (before or 0)


@needs_cache
@pytest.mark.parametrize(
    "write",
    [
        lambda ctx: api_key_create(account=ctx["account"], group=ctx["alpha"]),
        lambda ctx: api_key_mark_used(api_key_id=ctx["api_key"].pk, last_used=LastUsedMark(None)),
        lambda ctx: user_logged_in.send(sender=User, request=None, user=ctx["user"]),
        lambda ctx: account_create(username="dave"),
        lambda ctx: oauth_token_create(account=ctx["account"], scopes=["profile:read"]),
        lambda ctx: ctx["expired_token"].delete(),
    ],
    ids=[
        "key_created",
        "key_used",
        "user_signed_in",
        "account_created",
        "token_issued",
        "expired_token_deleted",
    ],
)
def test_it_keeps_every_cache_after_a_write_that_changes_no_answer(alice, alpha_group, write):
    api_key, _ = api_key_create(account=alice, group=alpha_group)
    expired_token, _ = oauth_token_create(account=alice, scopes=["profile:read"])
    AccessToken.objects.filter(pk=expired_token.pk).update(expires=timezone.now() - timedelta(seconds=1))
    expired_token.refresh_from_db()
    ctx = {
        "api_key": api_key,
        "user": User.objects.get(pk=alice.user_id),
        "account": alice,
        "alpha": alpha_group,
        "expired_token": expired_token,
    }
    before = generation()

    write(ctx)

    assert generation() == before
