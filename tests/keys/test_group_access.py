"""The access decisions (keys/group_access.py) as a matrix: every group state, every override rule and
every model outcome, each with its status, type and code. Credentials are real keys and tokens,
verified the way a request verifies them."""

from __future__ import annotations

import pytest

from accounts.services import account_create, account_set_groups
from accounts.snapshots import AccountSnapshot
from api.errors import api_error_for
from core.errors import ApiError, DomainError
from groups.models import Group
from groups.snapshots import GroupSnapshot
from images.access import image_model_resolve
from keys.authentication import credential_verify
from keys.credentials import Credential
from keys.group_access import group_resolve_for_credential
from tests.keys.conftest import assert_compatible_error, bearer, group_make, model_make

pytestmark = pytest.mark.django_db


def set_group(group: Group, **fields) -> None:
    for name, value in fields.items():
        setattr(group, name, value)
    group.save(update_fields=list(fields))


@pytest.fixture
def key_credential(alice, alpha_group, alpha_model, key_for):
    return lambda: credential_verify(secret=key_for(alice, alpha_group))


@pytest.fixture
def carol_credential(carol, alpha_model, beta_model, gamma_model, token_for):
    return lambda: credential_verify(secret=token_for(carol, ["profile:read", "models:invoke"]))


def resolve(credential, model):
    return image_model_resolve(credential=credential, requested_model=model, operation="generate")


def assert_refused(call, *, status: int, type_: str, code: str) -> ApiError:
    with pytest.raises((ApiError, DomainError)) as caught:
        call()
    error = api_error_for(caught.value)
    assert (error.status, error.type, error.code) == (status, type_, code), error.message
    return error


# --- the bound group of a manual key, and the current group of an OAuth token ------------------------

GROUP_STATES = [
    ("deleted", 403, "permission_error", "GROUP_DELETED"),
    ("disabled", 403, "permission_error", "GROUP_DISABLED"),
    ("unavailable", 400, "invalid_request_error", "GROUP_UNAVAILABLE"),
]


def test_it_serves_an_api_key_in_its_active_bound_group(key_credential, alpha_group, alpha_model):
    resolved = resolve(key_credential(), "alpha-image-2")

    assert resolved.group.pk == alpha_group.pk
    assert resolved.image_model.pk == alpha_model.pk
    assert resolved.model_name == "alpha-image-2"


@pytest.mark.parametrize(("state", "status", "type_", "code"), GROUP_STATES)
def test_it_refuses_an_api_key_whose_bound_group_is_not_active(
    key_credential, alpha_group, state, status, type_, code
):
    set_group(alpha_group, status=state)
    credential = key_credential()  # verified per request, after the change

    assert_refused(lambda: resolve(credential, "alpha-image-2"), status=status, type_=type_, code=code)


@pytest.mark.parametrize(("state", "status", "type_", "code"), GROUP_STATES)
def test_it_refuses_an_oauth_token_whose_current_group_is_not_active(
    carol_credential, alpha_group, state, status, type_, code
):
    set_group(alpha_group, status=state)
    credential = carol_credential()  # verified per request, after the change

    assert_refused(lambda: resolve(credential, "alpha-image-2"), status=status, type_=type_, code=code)


def test_it_serves_an_oauth_token_in_its_current_group(carol_credential, alpha_group, alpha_model):
    resolved = resolve(carol_credential(), "alpha-image-2")

    assert (resolved.group.pk, resolved.image_model.pk) == (alpha_group.pk, alpha_model.pk)


def test_it_refuses_an_oauth_token_whose_account_has_no_current_group(
    carol, alpha_group, beta_group, gamma_group, carol_credential
):
    account_set_groups(account=carol, allowed_groups=[alpha_group, gamma_group], current_group=None)

    assert_refused(
        lambda: resolve(carol_credential(), "alpha-image-2"),
        status=400,
        type_="invalid_request_error",
        code="GROUP_UNAVAILABLE",
    )


def test_it_refuses_an_oauth_token_whose_current_group_is_no_longer_allowed(
    carol, alpha_group, gamma_group, carol_credential
):
    assert resolve(carol_credential(), "alpha-image-2").group.pk == alpha_group.pk
    carol.allowed_groups.set([gamma_group])  # an operator removed Alpha but left it current

    # The token's next request (its credential carries the allowed groups read with it).
    assert_refused(
        lambda: resolve(carol_credential(), "alpha-image-2"),
        status=403,
        type_="permission_error",
        code="GROUP_NOT_ALLOWED",
    )


# --- `<group_id>:<model>` overrides (OAuth tokens only) ------------------------------------------------


def test_it_serves_an_oauth_override_in_the_selected_group_with_the_prefix_stripped(
    carol_credential, gamma_group, gamma_model
):
    resolved = resolve(carol_credential(), "3:gamma-image-1")

    assert resolved.group.pk == gamma_group.pk
    assert resolved.image_model.pk == gamma_model.pk
    assert resolved.model_name == "gamma-image-1"


def test_it_reports_an_override_in_the_group_selection(carol_credential, gamma_group):
    selection = group_resolve_for_credential(credential=carol_credential(), requested_model="3:x")

    assert (selection.group.pk, selection.model_name, selection.overridden) == (gamma_group.pk, "x", True)


def test_it_refuses_an_override_to_a_missing_group(carol_credential):
    assert_refused(
        lambda: resolve(carol_credential(), "99:gamma-image-1"),
        status=400,
        type_="invalid_request_error",
        code="GROUP_UNAVAILABLE",
    )


def test_it_refuses_an_override_to_a_group_id_beyond_any_column(carol_credential):
    assert_refused(
        lambda: resolve(carol_credential(), "9999999999:gamma-image-1"),
        status=400,
        type_="invalid_request_error",
        code="GROUP_UNAVAILABLE",
    )


def test_it_refuses_an_override_to_a_group_the_account_may_not_use(carol_credential, demo_upstream):
    delta = group_make(group_id=4, name="Delta-Image")
    model_make(model_id="delta-image", group=delta, upstream=demo_upstream)

    assert_refused(
        lambda: resolve(carol_credential(), "4:delta-image"),
        status=403,
        type_="permission_error",
        code="GROUP_NOT_ALLOWED",
    )


@pytest.mark.parametrize("state", ["deleted", "disabled", "unavailable"])
def test_it_refuses_an_override_to_a_group_that_is_not_active(carol_credential, gamma_group, state):
    set_group(gamma_group, status=state)
    credential = carol_credential()  # verified per request, after the change

    assert_refused(
        lambda: resolve(credential, "3:gamma-image-1"),
        status=400,
        type_="invalid_request_error",
        code="GROUP_UNAVAILABLE",
    )


@pytest.mark.parametrize(
    "target_fields",
    [{"billing": "subscription"}, {"allow_group_override": False}],
    ids=["target_subscription_billed", "target_disallows_override"],
)
def test_it_refuses_an_override_into_a_group_that_does_not_support_it(
    carol_credential, gamma_group, target_fields
):
    set_group(gamma_group, **target_fields)
    credential = carol_credential()  # verified per request, after the change

    assert_refused(
        lambda: resolve(credential, "3:gamma-image-1"),
        status=409,
        type_="invalid_request_error",
        code="GROUP_OVERRIDE_UNSUPPORTED",
    )


def test_it_refuses_an_override_into_the_subscription_group_of_the_spec(carol_credential):
    # Beta-API is subscription-billed and does not allow overrides.
    assert_refused(
        lambda: resolve(carol_credential(), "2:beta-imagine-image"),
        status=409,
        type_="invalid_request_error",
        code="GROUP_OVERRIDE_UNSUPPORTED",
    )


@pytest.mark.parametrize(
    "current_fields",
    [{"billing": "subscription"}, {"allow_group_override": False}],
    ids=["current_subscription_billed", "current_disallows_override"],
)
def test_it_refuses_an_override_out_of_a_current_group_that_does_not_support_it(
    carol_credential, alpha_group, current_fields
):
    set_group(alpha_group, **current_fields)
    credential = carol_credential()  # verified per request, after the change

    assert_refused(
        lambda: resolve(credential, "3:gamma-image-1"),
        status=409,
        type_="invalid_request_error",
        code="GROUP_OVERRIDE_UNSUPPORTED",
    )


def test_it_lets_an_account_without_a_current_group_select_an_allowed_group(
    carol, alpha_group, gamma_group, gamma_model, carol_credential
):
    account_set_groups(account=carol, allowed_groups=[alpha_group, gamma_group], current_group=None)

    assert resolve(carol_credential(), "3:gamma-image-1").group.pk == gamma_group.pk


def test_it_treats_a_non_numeric_prefix_as_part_of_the_model_name(carol_credential):
    assert_refused(
        lambda: resolve(carol_credential(), "Gamma-Image:gamma-image-1"),
        status=404,
        type_="invalid_request_error",
        code="model_not_found",
    )


def test_it_does_not_treat_a_prefix_as_an_override_for_a_manual_key(key_credential, gamma_model):
    selection = group_resolve_for_credential(credential=key_credential(), requested_model="3:gamma-image-1")
    assert selection.overridden is False
    assert selection.model_name == "3:gamma-image-1"

    assert_refused(
        lambda: resolve(key_credential(), "3:gamma-image-1"),
        status=404,
        type_="invalid_request_error",
        code="model_not_found",
    )


# --- models and image capability -------------------------------------------------------------------


def test_it_answers_model_not_found_for_a_model_no_group_has(key_credential):
    error = assert_refused(
        lambda: resolve(key_credential(), "no-such-model"),
        status=404,
        type_="invalid_request_error",
        code="model_not_found",
    )
    assert error.param == "model"


def test_it_answers_model_not_allowed_for_a_model_of_another_group(key_credential, gamma_model):
    assert_refused(
        lambda: resolve(key_credential(), "gamma-image-1"),
        status=403,
        type_="permission_error",
        code="model_not_allowed",
    )


def test_it_counts_only_enabled_models(key_credential, alpha_model, gamma_model):
    credential = key_credential()
    for image_model in (alpha_model, gamma_model):
        image_model.enabled = False
        image_model.save(update_fields=["enabled"])

    for name in ("alpha-image-2", "gamma-image-1"):
        assert_refused(
            lambda name=name: resolve(credential, name),
            status=404,
            type_="invalid_request_error",
            code="model_not_found",
        )


def test_it_refuses_image_endpoints_to_a_group_without_image_capability(key_credential, alpha_group):
    set_group(alpha_group, image_enabled=False)
    credential = key_credential()  # verified per request, after the change

    assert_refused(
        lambda: resolve(credential, "alpha-image-2"),
        status=403,
        type_="permission_error",
        code="image_group_required",
    )


@pytest.mark.parametrize("model", [None, "", "   ", 42, ["alpha-image-2"]])
def test_it_requires_a_model_name(key_credential, model):
    error = assert_refused(
        lambda: resolve(key_credential(), model),
        status=400,
        type_="invalid_request_error",
        code="missing_required_parameter",
    )
    assert error.param == "model"


def test_it_resolves_edits_like_generations(key_credential, alpha_model):
    resolved = image_model_resolve(
        credential=key_credential(), requested_model="alpha-image-2", operation="edit"
    )

    assert resolved.image_model.pk == alpha_model.pk


# --- the same decisions over HTTP ----------------------------------------------------------------------


@pytest.mark.parametrize(("state", "status", "type_", "code"), GROUP_STATES)
def test_models_endpoint_answers_the_bound_groups_state(
    client, alice_key, alpha_group, state, status, type_, code
):
    set_group(alpha_group, status=state)

    response = client.get("/v1/models", headers=bearer(alice_key))

    assert_compatible_error(response, status=status, type_=type_, code=code)


@pytest.mark.parametrize(("state", "status", "type_", "code"), GROUP_STATES)
def test_models_endpoint_answers_the_current_groups_state_for_oauth(
    client, alice_token, alpha_group, state, status, type_, code
):
    set_group(alpha_group, status=state)

    response = client.get("/v1/models", headers=bearer(alice_token))

    assert_compatible_error(response, status=status, type_=type_, code=code)


def test_a_key_bound_to_a_group_is_unaffected_by_the_accounts_current_group(
    client, alpha_group, beta_group, beta_model, key_for
):
    account = account_create(username="dave")
    account_set_groups(account=account, allowed_groups=[alpha_group, beta_group], current_group=alpha_group)
    secret = key_for(account, beta_group)

    response = client.get("/v1/models", headers=bearer(secret))

    assert response.status_code == 200
    assert [item["id"] for item in response.json()["data"]] == ["beta-imagine-image"]


def test_a_console_credential_is_served_by_the_group_it_is_bound_to(carol, gamma_group, gamma_model):
    credential = Credential(
        kind="console",
        id=carol.pk,
        account=AccountSnapshot.from_model(carol),
        bound_group=GroupSnapshot.from_model(gamma_group),
    )

    resolved = resolve(credential, "gamma-image-1")

    assert (resolved.group.pk, resolved.image_model.pk) == (gamma_group.pk, gamma_model.pk)


# --- decisions after a change: the per-process cache (with Redis) must not answer from before it ------


def test_it_refuses_an_override_to_a_group_disabled_after_it_served_one(
    carol_credential, gamma_group, django_capture_on_commit_callbacks
):
    credential = carol_credential()
    assert resolve(credential, "3:gamma-image-1").group.pk == gamma_group.pk  # now cached, with Redis
    with django_capture_on_commit_callbacks(execute=True):  # the commit of the change
        set_group(gamma_group, status="disabled")

    assert_refused(
        lambda: resolve(carol_credential(), "3:gamma-image-1"),
        status=400,
        type_="invalid_request_error",
        code="GROUP_UNAVAILABLE",
    )


def test_it_answers_model_not_allowed_once_the_model_moved_out_of_the_group(
    key_credential, alpha_model, gamma_group, django_capture_on_commit_callbacks
):
    assert resolve(key_credential(), "alpha-image-2").image_model.pk == alpha_model.pk
    with django_capture_on_commit_callbacks(execute=True):
        alpha_model.group = gamma_group
        alpha_model.save(update_fields=["group"])

    assert_refused(
        lambda: resolve(key_credential(), "alpha-image-2"),
        status=403,
        type_="permission_error",
        code="model_not_allowed",
    )
