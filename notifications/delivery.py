"""Sending the outbox: `manage.py deliver_notifications` claims the events that are due, sends each to
its account's webhook (an HTTPS POST of the signed JSON event) and by email when EMAIL_HOST is set,
and records how it went. Nothing is sent from a request.

A claim is short: due pending events are locked (FOR UPDATE SKIP LOCKED on PostgreSQL, so several
workers share the work) and leased (their next attempt moved `LEASE` ahead) in one transaction; they
are sent after it, with no transaction open. A worker that dies mid-send leaves its events to be
claimed again when the lease ends: delivery is at least once, and the event id header lets a receiver
ignore a repeat. A 2xx answer is delivered; anything else is retried after `BACKOFF_SECONDS` (with
jitter), and after the last attempt the event is failed.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction
from django.utils import timezone

from notifications.models import AlertSettings, Notification
from notifications.signing import EVENT_ID_HEADER, SIGNATURE_HEADER, signature_header
from notifications.targets import webhook_target_check
from upstreams.errors import UrlRefused
from upstreams.pinned import PinnedHTTPAdapter
from upstreams.ssrf import peer_address_check
from upstreams.transport import UpstreamReply, connection_never_made

logger = logging.getLogger("gateway.notifications")

# The wait after each failed attempt: 1 min, 5 min, 30 min, 2 h, 12 h; the attempt after the last
# wait is the last one.
BACKOFF_SECONDS = (60, 300, 1800, 7200, 43200)
MAX_ATTEMPTS = len(BACKOFF_SECONDS) + 1
JITTER = 0.1  # each wait is moved by up to ±10 %, so that retries of many events do not come together
LEASE = timedelta(minutes=5)  # a claimed event is not claimed again for this long
TIMEOUT_SECONDS = (5.0, 10.0)  # connect, read
ERROR_CHARS = 500


@dataclass(frozen=True)
class DeliveryCounts:
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    skipped: int = 0

    def __add__(self, other: DeliveryCounts) -> DeliveryCounts:
        return DeliveryCounts(
            self.delivered + other.delivered,
            self.retried + other.retried,
            self.failed + other.failed,
            self.skipped + other.skipped,
        )


def notification_event(*, notification: Notification) -> dict[str, Any]:
    """The event as the webhook sends it: id, type, created (unix seconds), account, data."""
    return {
        "id": notification.event_id,
        "type": notification.kind,
        "created": int(notification.created_at.timestamp()),
        "account": notification.account_id,
        "data": notification.payload,
    }


def notifications_claim(*, now: datetime, limit: int) -> list[Notification]:
    """Lock and lease up to `limit` due pending events (oldest due first)."""
    with transaction.atomic():
        due = Notification.objects.filter(
            status=Notification.Status.PENDING, next_attempt_at__lte=now
        ).order_by("next_attempt_at", "pk")
        if connection.features.has_select_for_update_skip_locked:
            # Another worker's claimed rows are skipped, not waited for.
            due = due.select_for_update(skip_locked=True)
        claimed = list(due[:limit])
        if claimed:
            Notification.objects.filter(pk__in=[n.pk for n in claimed]).update(next_attempt_at=now + LEASE)
    return claimed


def notifications_deliver_due(
    *, now: datetime | None = None, limit: int = 50, stopping: Callable[[], bool] | None = None
) -> DeliveryCounts:
    """One round of the worker: claim what is due and send it. `now` moves the clock (tests). When
    `stopping()` turns true between two events, the events claimed and not yet sent are handed back
    (due again at once, for another worker) and the round ends."""
    moment = now or timezone.now()
    counts = DeliveryCounts()
    claimed = notifications_claim(now=moment, limit=limit)
    for index, notification in enumerate(claimed):
        if stopping is not None and stopping():
            unsent = [n.pk for n in claimed[index:]]
            Notification.objects.filter(pk__in=unsent, status=Notification.Status.PENDING).update(
                next_attempt_at=moment
            )
            break
        counts += notification_deliver(notification=notification, now=moment)
    return counts


def notification_deliver(*, notification: Notification, now: datetime) -> DeliveryCounts:
    """Send one claimed event where its account wants it, and record the outcome (guarded by its
    status: an event resolved meanwhile is left alone)."""
    alert_settings = AlertSettings.objects.filter(account_id=notification.account_id).first()
    webhook_url = alert_settings.webhook_url if alert_settings is not None else ""
    emailing = bool(settings.EMAIL_HOST) and (alert_settings is None or alert_settings.email_enabled)
    recipient = notification.account.user.email if emailing else ""
    attempts = notification.attempts + 1
    fields: dict[str, Any] = {"attempts": attempts}
    errors = []
    if recipient and notification.emailed_at is None:
        try:
            _email_send(notification=notification, recipient=recipient)
            fields["emailed_at"] = now
        except Exception as exc:  # any SMTP or backend failure: retried with the webhook
            errors.append(f"email: {exc}")
    if webhook_url and alert_settings is not None:
        error = _webhook_send(
            notification=notification, url=webhook_url, secret=alert_settings.webhook_secret
        )
        if error:
            errors.append(f"webhook: {error}")
    if not webhook_url and not recipient:
        outcome = DeliveryCounts(skipped=1)
        fields.update(status=Notification.Status.SKIPPED, last_error="no webhook URL or email to send to")
    elif not errors:
        outcome = DeliveryCounts(delivered=1)
        fields.update(status=Notification.Status.DELIVERED, delivered_at=now, last_error="")
    elif attempts >= MAX_ATTEMPTS:
        outcome = DeliveryCounts(failed=1)
        fields.update(status=Notification.Status.FAILED, last_error="; ".join(errors)[:ERROR_CHARS])
    else:
        outcome = DeliveryCounts(retried=1)
        fields.update(
            next_attempt_at=now + backoff_delay(attempts=attempts),
            last_error="; ".join(errors)[:ERROR_CHARS],
        )
    Notification.objects.filter(pk=notification.pk, status=Notification.Status.PENDING).update(**fields)
    return outcome


def backoff_delay(*, attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed attempt, with jitter."""
    base = BACKOFF_SECONDS[min(attempts, len(BACKOFF_SECONDS)) - 1]
    return timedelta(seconds=base * random.uniform(1 - JITTER, 1 + JITTER))


def _webhook_send(*, notification: Notification, url: str, secret: str) -> str:
    """POST the signed event; "" when the receiver answered 2xx, else what went wrong."""
    body = json.dumps(notification_event(notification=notification), separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "ImageGateway-Webhooks/1",
        EVENT_ID_HEADER: notification.event_id,
        SIGNATURE_HEADER: signature_header(
            secret=secret, timestamp=int(timezone.now().timestamp()), body=body
        ),
    }
    try:
        target = webhook_target_check(url=url)
    except UrlRefused as refused:
        return f"refused: {refused.message}"
    response: requests.Response | None = None
    for pinned_url in target.pinned_urls:
        try:
            # Sent to an address checked (the host is not resolved again, upstreams/pinned.py), the
            # next one only when this one could not be connected to; no redirect is followed (a 3xx
            # is a failure), no proxy or .netrc from the environment.
            response = _session().post(
                pinned_url,
                data=body,
                headers={**headers, "Host": target.host_header},
                timeout=TIMEOUT_SECONDS,
                stream=True,
                allow_redirects=False,
            )
            break
        except requests.ConnectionError as exc:
            if not connection_never_made(exc) or pinned_url == target.pinned_urls[-1]:
                return f"{type(exc).__name__}: {exc}"
        except requests.RequestException as exc:
            return f"{type(exc).__name__}: {exc}"
    assert response is not None  # a failure at the last address has returned
    with response:
        try:
            # A second line: the address actually connected to obeys the same rules.
            peer = UpstreamReply(response=response, body=None).peer
            peer_address_check(peer=peer, port=target.origin.port)
        except UrlRefused as refused:
            return f"refused: {refused.message}"
        if 200 <= response.status_code < 300:
            return ""
        return f"HTTP {response.status_code}"


@functools.cache
def _session() -> requests.Session:
    """The worker's HTTP client for webhooks: its connection pools, requests sent to the addresses
    checked with TLS verified against the host's name (upstreams/pinned.py), and nothing read from
    the environment (proxies, ~/.netrc)."""
    session = requests.Session()
    session.trust_env = False
    adapter = PinnedHTTPAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _email_send(*, notification: Notification, recipient: str) -> None:
    subject, text = notification_email_text(notification=notification)
    send_mail(subject, text, None, [recipient], fail_silently=False)


def notification_email_text(*, notification: Notification) -> tuple[str, str]:
    """The email's subject and body: what crossed which line, and the event as the webhook sends it."""
    data = notification.payload
    if notification.kind == Notification.Kind.BALANCE_FLOOR:
        subject = "Your balance is below its floor"
        line = f"The available balance ({data['available_balance']}) is below the floor of {data['floor']}."
    elif notification.kind == Notification.Kind.SUBSCRIPTION_CAP:
        subject = f"{data['percentage']} % of a subscription cap used"
        line = (
            f"The {data['period']} cap of subscription {data['subscription']} has {data['used']} of "
            f"{data['cap']} used ({data['percentage']} % reached)."
        )
    else:
        subject = f"{data['percentage']} % of an API key's budget used"
        line = (
            f"API key {data['api_key']} has used {data['used']} of its {data['budget_period']} budget of "
            f"{data['budget']} ({data['percentage']} % reached)."
        )
    event = json.dumps(notification_event(notification=notification), indent=2)
    return f"[Image Gateway] {subject}", f"{line}\n\nEvent {notification.event_id}:\n{event}\n"
