"""Alert fixtures: an account's alert settings, set as its owner sets them."""

from __future__ import annotations

from decimal import Decimal

from notifications.models import DEFAULT_PERCENTAGES, AlertSettings
from tests.billing.conftest import _clear_limit_counters, carol  # noqa: F401 - fixtures used here too


def alerts_set(account, *, floor=None, percentages=None, webhook_url="", webhook_secret="", email=True):
    """The account's alert settings, written as they are stored (the services' checks have their own
    tests)."""
    settings, _ = AlertSettings.objects.update_or_create(
        account_id=account.pk,
        defaults={
            "balance_floor": None if floor is None else Decimal(floor),
            "percentages": list(DEFAULT_PERCENTAGES if percentages is None else percentages),
            "webhook_url": webhook_url,
            "webhook_secret": webhook_secret,
            "email_enabled": email,
        },
    )
    return settings
