"""An account's alert settings, as its owner (console) or staff (admin) set them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from urllib.parse import urlsplit

from django.db import transaction
from django.utils import timezone

from accounts.models import Account, User
from billing.money import MoneyError, money_parse
from core.modelutils import queryset_delete_in_batches
from notifications.errors import AlertSettingsInvalid
from notifications.models import DEFAULT_PERCENTAGES, AlertSettings, Notification
from notifications.signing import webhook_secret_generate
from notifications.targets import webhook_url_clean

MAX_PERCENTAGES = 10
audit_logger = logging.getLogger("gateway.audit")


@dataclass(frozen=True)
class AlertSettingsInput:
    """What an owner sets: the balance floor (an amount as text or Decimal; None: none), the
    percentages, the webhook URL ("": none) and whether events are emailed."""

    balance_floor: Decimal | str | None
    percentages: list[int]
    webhook_url: str
    email_enabled: bool


def alert_percentages_parse(*, text: str) -> list[int]:
    """ "80, 100" as [80, 100]: whole percentages from 1 to 100, each once, in order; AlertSettingsInvalid
    otherwise. An empty text: no percentage (budgets and caps then emit nothing)."""
    values = []
    for part in text.replace(";", ",").split(","):
        part = part.strip().rstrip("%").strip()
        if not part:
            continue
        if not part.isdigit() or not 1 <= int(part) <= 100:
            raise AlertSettingsInvalid(
                f"{part!r} is not a whole percentage from 1 to 100.", param="percentages"
            )
        values.append(int(part))
    unique = sorted(set(values))
    if len(unique) > MAX_PERCENTAGES:
        raise AlertSettingsInvalid(f"At most {MAX_PERCENTAGES} percentages.", param="percentages")
    return unique


def alert_settings_clean(*, values: AlertSettingsInput) -> AlertSettingsInput:
    """The input checked: a floor that is an amount of money (not negative), percentages from 1 to
    100, a webhook URL the request-forgery rules allow (upstreams/ssrf.py). AlertSettingsInvalid
    names the field refused."""
    floor = None
    if values.balance_floor is not None:
        try:
            floor = money_parse(values.balance_floor)
        except MoneyError as refused:
            raise AlertSettingsInvalid(
                f"The balance floor is refused: {refused}.", param="balance_floor"
            ) from None
    percentages = alert_percentages_parse(text=",".join(str(p) for p in values.percentages))
    return AlertSettingsInput(
        balance_floor=floor,
        percentages=percentages,
        webhook_url=webhook_url_clean(url=values.webhook_url),
        email_enabled=values.email_enabled,
    )


def alert_settings_get(*, account: Account) -> AlertSettings:
    """The account's settings; an unsaved row with the defaults when it has none."""
    found = AlertSettings.objects.filter(account_id=account.pk).first()
    return found if found is not None else AlertSettings(account_id=account.pk)


def alert_settings_set(*, account: Account, values: AlertSettingsInput) -> tuple[AlertSettings, str | None]:
    """Check and save the account's settings. Returns them and the webhook secret when one was made
    now (a URL set where there was none), for the owner to copy; otherwise None."""
    clean = alert_settings_clean(values=values)
    with transaction.atomic():
        current = AlertSettings.objects.select_for_update().filter(account_id=account.pk).first()
        row = current if current is not None else AlertSettings(account_id=account.pk)
        new_secret = None
        if clean.webhook_url and not row.webhook_secret:
            new_secret = webhook_secret_generate()
            row.webhook_secret = new_secret
        row.balance_floor = clean.balance_floor
        row.percentages = clean.percentages
        row.webhook_url = clean.webhook_url
        row.email_enabled = clean.email_enabled
        if current is None:
            row.save(force_insert=True)
        else:
            row.save(
                update_fields=[
                    "balance_floor",
                    "percentages",
                    "webhook_url",
                    "webhook_secret",
                    "email_enabled",
                    "updated_at",
                ]
            )
    return row, new_secret


def alert_settings_set_by_staff(
    *, staff: User, account: Account, values: AlertSettingsInput
) -> tuple[AlertSettings, str | None]:
    """`alert_settings_set` on a staff user's behalf (the provisioning API), logged to `gateway.audit`
    (the webhook's host, never its secret)."""
    row, new_secret = alert_settings_set(account=account, values=values)
    audit_logger.info(
        "staff=%s action=alert_settings_set target=account:%s floor=%s percentages=%s webhook=%s email=%s",
        staff.get_username(),
        account.pk,
        row.balance_floor if row.balance_floor is not None else "-",
        ",".join(str(p) for p in row.percentages) or "-",
        urlsplit(row.webhook_url).hostname or "-",
        "on" if row.email_enabled else "off",
    )
    return row, new_secret


def alert_webhook_secret_rotate(*, account: Account) -> str:
    """A new signing secret for the account's webhook (the old one stops signing at once)."""
    secret = webhook_secret_generate()
    with transaction.atomic():
        row = AlertSettings.objects.select_for_update().filter(account_id=account.pk).first()
        if row is None:
            row = AlertSettings(account_id=account.pk, percentages=list(DEFAULT_PERCENTAGES))
            row.webhook_secret = secret
            row.save(force_insert=True)
        else:
            row.webhook_secret = secret
            row.save(update_fields=["webhook_secret", "updated_at"])
    return secret


# How long a settled notification (delivered, failed or skipped) stays listed; pending ones stay.
NOTIFICATION_RETENTION_DAYS = 90


def notifications_purge(
    *, older_than_days: int = NOTIFICATION_RETENTION_DAYS, now: datetime | None = None, batch_size: int = 5000
) -> int:
    """Delete the settled notifications created more than `older_than_days` ago, in batches; a
    pending one is kept whatever its age (the worker still owes its delivery). Returns how many.

    A purged row no longer marks its line as emitted for its window; the windows it could mark are
    long over, but a total window's line crossed again (usage given back, then spent) emits anew."""
    cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    settled = Notification.objects.filter(created_at__lt=cutoff).exclude(status=Notification.Status.PENDING)
    return queryset_delete_in_batches(settled, batch_size=batch_size)
