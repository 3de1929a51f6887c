"""Who may use the staff provisioning API (/v1/admin/...): the one access decision for it.

- An OAuth token needs the `admin:provision` scope (else 403 `insufficient_scope`), and its user
  must be staff.
- A manual API key counts as a staff credential when its account's user is staff: keys are not
  scope-limited, so a staff user's key acts with that user's powers.
- In both cases `is_staff` (and `is_active`) is read from the database at every call, not from the
  credential cache: taking staff away from a user stops their credentials at the next request
  (else 403 `staff_required`).
"""

from __future__ import annotations

from accounts.models import User
from keys.credentials import SCOPE_ADMIN_PROVISION, Credential
from keys.errors import ScopeMissing, StaffRequired


def admin_provision_check(*, credential: Credential) -> User:
    """The staff user the credential acts for; raises 403 unless it may use the provisioning API."""
    if credential.kind == "oauth" and SCOPE_ADMIN_PROVISION not in credential.scopes:
        raise ScopeMissing(
            f"This token may not use the provisioning API: it needs the scope {SCOPE_ADMIN_PROVISION!r}, "
            "which only a staff user's token can hold."
        )
    user = User.objects.filter(pk=credential.account.user_id, is_active=True, is_staff=True).first()
    if credential.kind not in ("api_key", "oauth") or user is None:
        raise StaffRequired(
            "The provisioning API is for staff users only; this credential's user is not staff."
        )
    return user
