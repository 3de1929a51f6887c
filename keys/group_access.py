"""The access decisions: which group serves a credential's request, and which models it may use there.

Everything that needs such a decision calls these functions; nothing else decides.

- Calling a model spends the account's money: an OAuth token needs the `models:invoke` scope for it
  (`models_invoke_check`, which every endpoint family's resolve function calls first), else 403
  `insufficient_scope`; so does listing every allowed group's models. Manual keys are not scope-limited.
- A manual API key (like any credential other than an OAuth token) is served by its bound group, while
  that group is among its account's allowed groups (else 403 GROUP_NOT_ALLOWED); a
  `<group_id>:<model>` prefix is not an override for it (the model name is looked up as written).
- An OAuth token is served by its account's current group, unless `model` is `<group_id>:<model>`
  (numeric id): then by that group, if the account may use it and both groups allow the override.
- The serving group must be active: deleted 403 GROUP_DELETED, disabled 403 GROUP_DISABLED,
  unavailable 400 GROUP_UNAVAILABLE (a selected target that is not active: 400 GROUP_UNAVAILABLE).
- Which models a group offers, and which endpoints may use them, is each endpoint family's own decision
  (`images.access` for the image endpoints), taken on the group this module resolves.
- An API key with a `models` list may call only those model ids (`key_model_check`, which each
  family calls once it has found the model: 403 `model_not_allowed`), and `GET /v1/models` lists only
  them (`key_model_allowed`). The id is the one the caller named, whatever family serves the model.

Subscription checks (SUBSCRIPTION_NOT_FOUND / SUBSCRIPTION_INVALID) belong to billing's reserve step.

Groups are read through groups/selectors.py as snapshots, from per-process caches that every write to
them invalidates (the next call on every process sees it). A credential's account snapshot carries the
account's allowed groups, read and cached with the key or token (keys/selectors.py), so a call makes no
query for them; a change to them is seen by the next call on every process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from groups.errors import GroupDeleted, GroupDisabled, GroupUnavailable
from groups.models import Group
from groups.selectors import group_get
from groups.snapshots import GroupSnapshot
from keys.credentials import SCOPE_MODELS_INVOKE, Credential
from keys.errors import GroupNotAllowed, GroupOverrideUnsupported, ModelNotAllowedForKey, ScopeMissing

# `<group_id>:<model>`: a numeric id only (not a name), then a non-empty model name.
_OVERRIDE = re.compile(r"(?P<group_id>[0-9]{1,10}):(?P<model>.+)", re.DOTALL)
_MAX_GROUP_ID = 2_147_483_647  # the column is a 32-bit integer on PostgreSQL


@dataclass(frozen=True)
class GroupSelection:
    """The group serving a request and the model name to look up in it (prefix stripped)."""

    group: GroupSnapshot
    model_name: str | None
    overridden: bool


def models_invoke_check(*, credential: Credential) -> None:
    """Raise 403 `insufficient_scope` unless the credential may call models, and so spend its
    account's money: manual keys and the console always, OAuth tokens only with `models:invoke`.

    Every billed endpoint family calls this before anything else of its access decision."""
    if not credential.has_scope(SCOPE_MODELS_INVOKE):
        raise ScopeMissing(
            f"This token may not call models: it needs the scope {SCOPE_MODELS_INVOKE!r}, which "
            "lets an application spend your balance. Ask for it when authorizing the application."
        )


def key_model_allowed(*, credential: Credential, model_id: str) -> bool:
    """Whether the credential's own `models` list lets it call `model_id` (a key without a list, and
    every other credential, may call any model its group offers)."""
    allowed = credential.limits.model_ids
    return not allowed or model_id in allowed


def key_model_check(*, credential: Credential, model_id: str) -> None:
    """Raise 403 `model_not_allowed` (param `model`) when the key's `models` list does not name
    `model_id`: the model exists in the key's group, but this key may not call it."""
    if not key_model_allowed(credential=credential, model_id=model_id):
        shown = model_id if len(model_id) <= 200 else model_id[:200] + "…"
        raise ModelNotAllowedForKey(
            f"This API key may not call the model {shown!r}; GET /v1/models lists the models it may use.",
            param="model",
        )


def group_override_parse(*, requested_model: str) -> tuple[int, str] | None:
    """(group_id, model) when `requested_model` has the `<group_id>:<model>` form, else None."""
    match = _OVERRIDE.fullmatch(requested_model)
    if match is None:
        return None
    return int(match["group_id"]), match["model"]


def group_state_check(*, group: GroupSnapshot) -> None:
    """Raise the business error for a group that cannot serve requests (spec's group states)."""
    if group.status == Group.Status.ACTIVE:
        return
    if group.status == Group.Status.DELETED:
        raise GroupDeleted(f"The group {group.name!r} has been deleted.")
    if group.status == Group.Status.DISABLED:
        raise GroupDisabled(f"The group {group.name!r} has been disabled.")
    raise GroupUnavailable(f"The group {group.name!r} is unavailable.")


def group_override_supported(*, group: GroupSnapshot) -> bool:
    """Whether `<group_id>:<model>` may leave or enter this group (never for subscription billing)."""
    return group.allow_group_override and group.billing != Group.Billing.SUBSCRIPTION


def _credential_allows(*, credential: Credential, group: GroupSnapshot) -> bool:
    """May the credential's account use `group`? From the allowed groups read with the credential."""
    return group.pk in credential.account.allowed_group_ids


def _override_target(
    *, credential: Credential, current: GroupSnapshot | None, group_id: int
) -> GroupSnapshot:
    if current is not None and not group_override_supported(group=current):
        raise GroupOverrideUnsupported(
            f"Your current group {current.name!r} does not support selecting a group with "
            "'<group_id>:<model>'; send the model name without a prefix."
        )
    target = group_get(group_id=group_id) if group_id <= _MAX_GROUP_ID else None
    if target is None:
        raise GroupUnavailable(f"The group {group_id} does not exist.")
    if not _credential_allows(credential=credential, group=target):
        raise GroupNotAllowed(f"Your account may not use the group {target.name!r} ({target.pk}).")
    if target.status != Group.Status.ACTIVE:
        raise GroupUnavailable(f"The group {target.name!r} ({target.pk}) is {target.status}.")
    if not group_override_supported(group=target):
        raise GroupOverrideUnsupported(
            f"The group {target.name!r} ({target.pk}) cannot be selected with '<group_id>:<model>'."
        )
    return target


def group_resolve_for_credential(
    *, credential: Credential, requested_model: str | None = None
) -> GroupSelection:
    """The group that serves this credential's request for `requested_model` (None: no model, e.g. a
    listing). Raises the group-state, override and permission errors of the module docstring."""
    if credential.kind != "oauth":
        # Manual keys (and the console's own calls) are bound to exactly one group.
        group = credential.bound_group
        if group is None:
            raise GroupNotAllowed("This credential is not bound to a group.")
        if not _credential_allows(credential=credential, group=group):
            # The key was made while its account could use the group; an operator has taken it since.
            raise GroupNotAllowed(
                f"Your account may no longer use the group {group.name!r} this key is bound to."
            )
        group_state_check(group=group)
        return GroupSelection(group=group, model_name=requested_model, overridden=False)

    account = credential.account
    current = account.current_group
    override = group_override_parse(requested_model=requested_model) if requested_model else None
    if override is not None:
        group_id, model_name = override
        target = _override_target(credential=credential, current=current, group_id=group_id)
        return GroupSelection(group=target, model_name=model_name, overridden=True)
    if current is None:
        raise GroupUnavailable(
            "Your account has no current group; ask an operator to set one, or select an allowed "
            "group with '<group_id>:<model>'."
        )
    if not _credential_allows(credential=credential, group=current):
        raise GroupNotAllowed(f"Your account may not use its current group {current.name!r}.")
    group_state_check(group=current)
    return GroupSelection(group=current, model_name=requested_model, overridden=False)


@dataclass(frozen=True)
class ListedGroup:
    """A group whose models GET /v1/models lists. `prefixed`: its models are selected as
    `<group_id>:<model>` (the plain id would select them in the current group instead).
    `selectable`: False for an allowed group no id can select per request (e.g. a subscription group
    other than the current one): its models are listed by their plain ids, for information only."""

    group: GroupSnapshot
    prefixed: bool
    selectable: bool = True


def groups_listed_for_credential(*, credential: Credential, all_groups: bool = False) -> list[ListedGroup]:
    """The groups whose models GET /v1/models lists for this credential, in group id order.

    Default: the serving group (bound or current). With `all_groups` (honoured for OAuth tokens only,
    and only with `models:invoke`): every active allowed group - the current group by plain ids, a
    group the override can reach by `<group_id>:<model>`, and any other (which no id can select) by
    plain ids marked not selectable. Inactive groups serve nothing and are left out."""
    if not all_groups or credential.kind != "oauth":
        return [ListedGroup(group=group_resolve_for_credential(credential=credential).group, prefixed=False)]
    models_invoke_check(credential=credential)
    current = credential.account.current_group
    can_leave_current = current is None or group_override_supported(group=current)
    listed: list[ListedGroup] = []
    allowed = (group_get(group_id=group_id) for group_id in sorted(credential.account.allowed_group_ids))
    for group in allowed:
        if group is None or group.status != Group.Status.ACTIVE:
            continue
        if can_leave_current and group_override_supported(group=group):
            listed.append(ListedGroup(group=group, prefixed=True))
        elif current is not None and group.pk == current.pk:
            listed.append(ListedGroup(group=group, prefixed=False))
        else:
            listed.append(ListedGroup(group=group, prefixed=False, selectable=False))
    return listed
