"""Delivering the outbox: to a real local HTTP receiver that checks the signature, retried with
backoff after a failure, given up after the last attempt, emailed when EMAIL_HOST is set, and never
sent to an address the request-forgery rules refuse."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta
from decimal import Decimal
from ipaddress import ip_network

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing.ledger import wallet_top_up
from notifications.delivery import BACKOFF_SECONDS, MAX_ATTEMPTS, notifications_deliver_due
from notifications.models import Notification
from notifications.signing import signature_verify
from tests.billing.conftest import FakeUpstream, alpha_call, credential_for
from tests.notifications.conftest import alerts_set
from tests.notifications.receiver import webhook_receiver
from tests.rebinding import LoopbackPair, RebindingDns

pytestmark = [pytest.mark.django_db(transaction=True)]

SECRET = "whsec_test-secret"
LOOPBACK = (ip_network("127.0.0.0/8"),)


@pytest.fixture
def local_receiver(settings):
    """The receiver on 127.0.0.1, which the tests allow as the operator's own network (the rules
    refuse it otherwise)."""
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = LOOPBACK
    with webhook_receiver() as receiver:
        yield receiver


def floor_crossed(account, group) -> Notification:
    """A charge that takes the account (10.00) below its floor: the event it wrote."""
    alpha_call(credential_for(account), group, FakeUpstream())
    return Notification.objects.get()


def test_it_delivers_a_signed_event_to_the_webhook(alice, alpha_group, alpha_model, local_receiver):
    alerts_set(alice, floor="9.90", webhook_url=local_receiver.url, webhook_secret=SECRET)
    event = floor_crossed(alice, alpha_group)

    counts = notifications_deliver_due()

    assert (counts.delivered, counts.retried) == (1, 0)
    [request] = local_receiver.received
    assert request.path == "/hooks/gateway"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Gateway-Event-Id"] == event.event_id
    # The receiver's check, as docs/billing.md writes it: HMAC-SHA256 of "<t>.<body>" with the secret.
    signature = request.headers["X-Gateway-Signature"]
    parts = dict(part.split("=", 1) for part in signature.split(","))
    expected = hmac.new(SECRET.encode(), f"{parts['t']}.".encode() + request.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(parts["v1"], expected)
    now = int(timezone.now().timestamp())
    assert abs(int(parts["t"]) - now) < 60
    assert signature_verify(secret=SECRET, header=signature, body=request.body, now=now)
    assert not signature_verify(secret="whsec_other", header=signature, body=request.body, now=now)
    assert not signature_verify(secret=SECRET, header=signature, body=request.body, now=now + 3600)
    assert json.loads(request.body) == {
        "id": event.event_id,
        "type": "balance.below_floor",
        "created": int(event.created_at.timestamp()),
        "account": alice.pk,
        "data": {"floor": "9.90000000", "available_balance": "9.85000000"},
    }
    event.refresh_from_db()
    assert (event.status, event.attempts, event.last_error) == ("delivered", 1, "")
    assert event.delivered_at is not None
    assert notifications_deliver_due().delivered == 0  # sent once


def test_a_failing_receiver_is_retried_after_the_backoff(alice, alpha_group, alpha_model, local_receiver):
    alerts_set(alice, floor="9.90", webhook_url=local_receiver.url, webhook_secret=SECRET)
    event = floor_crossed(alice, alpha_group)
    local_receiver.answer(500)
    start = timezone.now()

    assert notifications_deliver_due(now=start).retried == 1
    event.refresh_from_db()
    assert (event.status, event.attempts, event.last_error) == ("pending", 1, "webhook: HTTP 500")
    wait = (event.next_attempt_at - start).total_seconds()
    assert BACKOFF_SECONDS[0] * 0.9 <= wait <= BACKOFF_SECONDS[0] * 1.1

    # Not due yet: nothing is sent.
    assert notifications_deliver_due(now=start + timedelta(seconds=30)).delivered == 0
    assert len(local_receiver.received) == 1

    assert notifications_deliver_due(now=start + timedelta(seconds=70)).delivered == 1
    event.refresh_from_db()
    assert (event.status, event.attempts, event.last_error) == ("delivered", 2, "")
    first, second = local_receiver.received
    assert first.body == second.body  # the same event
    assert first.headers["X-Gateway-Event-Id"] == second.headers["X-Gateway-Event-Id"] == event.event_id


def test_it_gives_up_after_the_last_attempt(alice, alpha_group, alpha_model, local_receiver):
    alerts_set(alice, floor="9.90", webhook_url=local_receiver.url, webhook_secret=SECRET)
    event = floor_crossed(alice, alpha_group)
    local_receiver.answer(*[503] * MAX_ATTEMPTS)
    moment = timezone.now()
    for _ in range(MAX_ATTEMPTS):
        notifications_deliver_due(now=moment)
        moment += timedelta(hours=14)  # past the longest wait
    event.refresh_from_db()
    assert (event.status, event.attempts, event.last_error) == ("failed", MAX_ATTEMPTS, "webhook: HTTP 503")
    assert len(local_receiver.received) == MAX_ATTEMPTS
    assert notifications_deliver_due(now=moment + timedelta(days=2)).failed == 0


def test_a_webhook_on_a_private_address_is_not_sent_to(alice, alpha_group, alpha_model, settings):
    with webhook_receiver() as receiver:
        # Set behind the services' back: the URL check when it is set has its own test.
        alerts_set(alice, floor="9.90", webhook_url=receiver.url, webhook_secret=SECRET)
        event = floor_crossed(alice, alpha_group)
        settings.GATEWAY_FETCH_PRIVATE_NETWORKS = ()
        notifications_deliver_due()
        assert receiver.received == []
    event.refresh_from_db()
    assert event.status == "pending" and event.attempts == 1
    assert event.last_error == "webhook: refused: the URL's host resolves to a non-public address"


def test_a_webhook_whose_name_rebinds_is_posted_to_the_address_checked_only(
    alice, alpha_group, alpha_model, settings, monkeypatch
):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.1/32"),)
    pair = LoopbackPair()
    try:
        # An attacker answers the check's lookups (up to two) with the allowed address, then another.
        dns = RebindingDns(monkeypatch, name="rebind.test", first="127.0.0.1", then="127.0.0.2", checked=2)
        alerts_set(
            alice, floor="9.90", webhook_url=f"http://rebind.test:{pair.port}/hook", webhook_secret=SECRET
        )
        event = floor_crossed(alice, alpha_group)
        dns.armed = True

        counts = notifications_deliver_due()

        assert pair.received["127.0.0.2"] == []
        assert counts.delivered == 1
        [request] = pair.received["127.0.0.1"]
        assert (request.method, request.path) == ("POST", "/hook")
        assert request.headers["host"] == f"rebind.test:{pair.port}"
        assert request.headers["x-gateway-event-id"] == event.event_id
    finally:
        pair.close()
    event.refresh_from_db()
    assert (event.status, event.attempts, event.last_error) == ("delivered", 1, "")


def test_a_webhook_address_that_cannot_be_connected_to_is_passed_over_for_the_next_one_checked(
    alice, alpha_group, alpha_model, settings, monkeypatch
):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.0/29"),)
    pair = LoopbackPair()
    try:
        # Nothing listens on 127.0.0.3 at the pair's port: the connection is refused, nothing is sent.
        RebindingDns(monkeypatch, name="two.test", first=("127.0.0.3", "127.0.0.1"), then="127.0.0.2")
        alerts_set(
            alice, floor="9.90", webhook_url=f"http://two.test:{pair.port}/hook", webhook_secret=SECRET
        )
        event = floor_crossed(alice, alpha_group)

        assert notifications_deliver_due().delivered == 1

        assert [(r.path, r.headers["host"]) for r in pair.received["127.0.0.1"]] == [
            ("/hook", f"two.test:{pair.port}")
        ]
        assert pair.received["127.0.0.2"] == []
    finally:
        pair.close()
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("delivered", 1)


def test_it_emails_the_owner_when_email_host_is_set(alice, alpha_group, alpha_model, settings, mailoutbox):
    settings.EMAIL_HOST = "smtp.example.com"
    alerts_set(alice, floor="9.90")
    event = floor_crossed(alice, alpha_group)

    assert notifications_deliver_due().delivered == 1

    [mail] = mailoutbox
    assert mail.to == ["alice@example.com"]
    assert mail.subject == "[Image Gateway] Your balance is below its floor"
    assert "9.85000000" in mail.body and event.event_id in mail.body
    event.refresh_from_db()
    assert event.status == "delivered" and event.emailed_at is not None


def test_an_email_already_sent_is_not_sent_again_while_the_webhook_is_retried(
    alice, alpha_group, alpha_model, settings, mailoutbox, local_receiver
):
    settings.EMAIL_HOST = "smtp.example.com"
    alerts_set(alice, floor="9.90", webhook_url=local_receiver.url, webhook_secret=SECRET)
    floor_crossed(alice, alpha_group)
    local_receiver.answer(500)
    moment = timezone.now()
    notifications_deliver_due(now=moment)
    notifications_deliver_due(now=moment + timedelta(minutes=2))
    assert len(mailoutbox) == 1
    assert len(local_receiver.received) == 2
    assert Notification.objects.get().status == "delivered"


def test_without_email_or_webhook_an_event_is_kept_and_skipped(
    alice, alpha_group, alpha_model, settings, mailoutbox
):
    settings.EMAIL_HOST = ""
    alerts_set(alice, floor="9.90")
    floor_crossed(alice, alpha_group)
    assert notifications_deliver_due().skipped == 1
    event = Notification.objects.get()
    assert (event.status, event.last_error) == ("skipped", "no webhook URL or email to send to")
    assert mailoutbox == []


def test_the_email_can_be_turned_off(alice, alpha_group, alpha_model, settings, mailoutbox):
    settings.EMAIL_HOST = "smtp.example.com"
    alerts_set(alice, floor="9.90", email=False)
    floor_crossed(alice, alpha_group)
    assert notifications_deliver_due().skipped == 1
    assert mailoutbox == []


def test_the_command_delivers_once(alice, alpha_group, alpha_model, local_receiver, capsys):
    alerts_set(alice, floor="9.90", webhook_url=local_receiver.url, webhook_secret=SECRET)
    floor_crossed(alice, alpha_group)
    call_command("deliver_notifications", "--once")
    assert "Delivered 1, retrying 0, failed 0, skipped 0" in capsys.readouterr().out
    assert Notification.objects.get().status == "delivered"
    assert len(local_receiver.received) == 1
    assert Decimal(json.loads(local_receiver.received[0].body)["data"]["floor"]) == Decimal("9.9")


def test_a_stopping_worker_hands_back_what_it_claimed_and_did_not_send(
    alice, bob, alpha_group, alpha_model, local_receiver
):
    wallet_top_up(account=bob, amount="10", reference="test")
    for account in (alice, bob):
        alerts_set(account, floor="9.90", webhook_url=local_receiver.url, webhook_secret=SECRET)
        alpha_call(credential_for(account), alpha_group, FakeUpstream(), request_id=f"r{account.pk}")
    moment = timezone.now()

    def stopping():  # asked before each event: stop once one has been sent
        return len(local_receiver.received) >= 1

    counts = notifications_deliver_due(now=moment, stopping=stopping)

    assert counts.delivered == 1 and len(local_receiver.received) == 1
    delivered, handed_back = Notification.objects.order_by("status")  # "delivered" < "pending"
    assert delivered.status == "delivered"
    assert (handed_back.status, handed_back.attempts, handed_back.next_attempt_at) == ("pending", 0, moment)
    assert notifications_deliver_due(now=moment).delivered == 1  # due again at once
