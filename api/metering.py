"""The one metered-call service every billed endpoint uses.

limits → reserve → call the upstream with no transaction open → capture on success, release on failure.
The limits, in order: the group's rpm (per credential), the key's own rpm; for a text call the
group's tpm (per credential) and the key's own, by the call's token ceiling; a concurrency slot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from api.usage import UsageScope
from billing.errors import InsufficientBalance, SubscriptionInvalid, SubscriptionNotFound
from billing.holds import hold_capture, hold_release, hold_reserve
from billing.idempotency import idempotency_charge_note
from billing.key_budgets import key_budget_for, key_budget_precheck
from billing.limits import (
    ConcurrencySlot,
    concurrency_slot_acquire,
    concurrency_slot_release,
    key_rate_limit_hit,
    rate_limit_hit,
)
from billing.models import Hold, Subscription
from billing.money import money_display, money_parse
from billing.selectors import subscription_get_active, wallet_available_get
from billing.subscriptions import subscription_hold_reserve
from billing.token_limits import (
    TokenWindowTake,
    token_window_give_back,
    token_window_settle,
    token_window_take,
)
from billing.usage import TokenCounts
from groups.models import Group
from groups.snapshots import GroupSnapshot
from keys.credentials import Credential
from notifications.alerts import capture_with_alerts

logger = logging.getLogger("gateway.billing")

T = TypeVar("T")


def transaction_open_by_application() -> bool:
    """True inside an atomic block opened by application code.

    Asks Django whether a durable atomic block could start here (`atomic(durable=True)` refuses to
    nest in another block, and Django's TestCase lets durable blocks run inside the transaction it
    wraps each test in). Outside any block nothing is entered (no connection, no query); inside one,
    `savepoint=False` makes the probe itself send nothing."""
    if not connection.in_atomic_block:
        return False
    try:
        with transaction.atomic(durable=True, savepoint=False):
            return False
    except RuntimeError:
        return True


def subscription_resolve_for_call(
    *, credential: Credential, group: GroupSnapshot, model_id: str, now: datetime
) -> Subscription:
    """The active subscription that pays for this call, or 403 SUBSCRIPTION_NOT_FOUND / _INVALID.

    A plan covers the models listed in its `model_ids` (every model of the group when empty)."""
    subscription = subscription_get_active(account_id=credential.account.pk, group_id=group.pk, at=now)
    if subscription is None:
        raise SubscriptionNotFound(
            f"No active subscription for group {group.name}: it does not exist or has expired."
        )
    if subscription.model_ids and model_id not in subscription.model_ids:
        raise SubscriptionInvalid(
            f"The subscription for group {group.name} does not cover model {model_id!r}."
        )
    return subscription


def reservation_precheck(
    *, credential: Credential, group: GroupSnapshot, price: Decimal, tokens: int | None = None
) -> None:
    """Refuse now a call `metered_begin` would refuse for its price (and, for a text call, its
    `tokens`), for calls with expensive work before it (decoding uploads, downloading image links):
    429 `rate_limit_exceeded` when a tokens-per-minute window has no room for `tokens`, 429
    USAGE_LIMIT_EXCEEDED when the API key's budget window has none for the price, 403
    INSUFFICIENT_BALANCE when a wallet-billed call's price is more than the account's available
    balance. A read each, none for a limit not set, and nothing counted. Only a pre-check:
    `metered_begin` is the guarantee; a subscription's caps are checked by it alone."""
    if tokens is not None:
        token_window_take(
            limit_key=credential.limit_key,
            group_tpm=group.tpm,
            api_key_id=credential.api_key_id,
            key_tpm=credential.limits.tpm,
            tokens=tokens,
            count=False,
        )
    amount = money_parse(price)
    key_budget_precheck(
        key_budget=key_budget_for(
            api_key_id=credential.api_key_id,
            budget=credential.limits.budget,
            period=credential.limits.budget_period,
        ),
        amount=amount,
        now=timezone.now(),
    )
    if group.billing == Group.Billing.SUBSCRIPTION:
        return
    if wallet_available_get(account_id=credential.account.pk) < amount:
        raise InsufficientBalance(
            f"Insufficient balance: this call costs {money_display(amount)} and the account's "
            "available balance does not cover it. Top up and try again."
        )


def request_rate_limits_hit(*, credential: Credential, group: GroupSnapshot, count: bool = True) -> None:
    """Count the call against the group's rpm (per credential), then the API key's own rpm: 429
    `rate_limit_exceeded` with Retry-After from whichever is reached first. `count=False` counts
    nothing and refuses when either minute is already full: a pre-check, for calls with expensive
    work before `metered_begin`, which counts them."""
    rate_limit_hit(limit_key=credential.limit_key, rpm=group.rpm, count=count)
    api_key_id = credential.api_key_id
    if api_key_id is not None:
        key_rate_limit_hit(api_key_id=api_key_id, rpm=credential.limits.rpm, count=count)


def _tokens_used(tokens: TokenCounts | None) -> int | None:
    """A text call's input (plain, cached and cache writes) plus output, as its usage reported them."""
    if tokens is None:
        return None
    return tokens.input + tokens.cached + tokens.cache_write + tokens.output


def connection_release() -> None:
    """With a connection pool, hand the call's connection back before the upstream call, so a call
    waiting on an upstream holds no database connection (capture takes one again)."""
    conn = connections[DEFAULT_DB_ALIAS]  # looked up once, not on every attribute read of the proxy
    if conn.settings_dict.get("OPTIONS", {}).get("pool") and not conn.in_atomic_block:
        conn.close()


class MeteredCall:
    """One reservation for one billed call: `capture()` after success, `release()` after failure,
    `close()` on every exit path (it releases a reservation left open and gives back the concurrency
    slot). Each is safe to call more than once; the hold itself resolves exactly once, and so does a
    text call's place in the tokens-per-minute windows (corrected to its usage, or given back)."""

    def __init__(
        self,
        *,
        usage: UsageScope,
        hold: Hold,
        slot: ConcurrencySlot | None,
        amount: Decimal,
        token_take: TokenWindowTake | None = None,
        subscription_caps: dict[str, Decimal | None] | None = None,
    ) -> None:
        self.usage = usage
        self.hold = hold
        self.slot = slot
        self.amount = amount
        self.token_take = token_take
        # A subscription hold's caps per window, which its capture's alerts watch.
        self.subscription_caps = subscription_caps
        self.resolved = False

    def capture(self, *, amount: Decimal | None = None) -> bool:
        """Charge the call and write its usage record (status 200, the amount charged), together: one
        statement on PostgreSQL. `amount` charges less than was reserved (a text call's exact cost;
        the rest is released); None charges the reservation. False when the hold had already
        expired: nothing is charged, and the record says 0. Either way the usage scope writes no
        second record."""
        if self.resolved:
            return False
        self.resolved = True
        # The call's tokens were spent whatever the capture finds: the windows keep what it used.
        token_window_settle(take=self.token_take, used=_tokens_used(self.usage.tokens))
        record = self.usage.record_build(status=200, error_code="")
        credential = self.usage.credential
        # The alerts this charge may set off are written in its transaction (notifications/alerts.py);
        # with no line it could cross, the capture runs alone.
        captured = capture_with_alerts(
            account_id=credential.account.pk,
            hold=self.hold,
            subscription_caps=self.subscription_caps,
            key_budget=credential.limits.budget,
            capture=lambda: hold_capture(hold=self.hold, amount=amount, usage_record=record),
            now=timezone.now(),
        )
        if record.pk is not None:
            self.usage.record = record
        if captured:
            captured_amount = self.hold.captured_amount
            self.usage.charged = captured_amount if captured_amount is not None else self.amount
            # An Idempotency-Key claimed around this call is now never freed: a retry must not
            # charge again.
            idempotency_charge_note()
            return True
        # The hold expired before the call returned (GATEWAY_HOLD_TTL_SECONDS shorter than the call):
        # release_stale_holds voided it, and a voided hold is never charged.
        logger.warning(
            "hold %s of request %s expired before capture; the call was not charged",
            self.hold.pk,
            self.usage.request_id,
        )
        return False

    def release(self) -> None:
        if not self.resolved:
            self.resolved = True
            token_window_give_back(take=self.token_take)
            _release(hold=self.hold)

    def close(self) -> None:
        """Release an unresolved reservation, give the slot and the connection back. Never raises:
        it runs after a capture too, and nothing after a capture may turn the answer into an error
        (a slot left behind expires, a connection left broken is discarded by the pool)."""
        self.release()
        slot, self.slot = self.slot, None
        concurrency_slot_release(slot=slot)
        try:
            # The call's last statement has run: with a pool, give the connection back now rather
            # than after the answer has been written to the client (a slow reader would hold it).
            connection_release()
        except Exception:
            logger.exception("could not give back the connection of request %s", self.usage.request_id)


def metered_begin(
    *,
    usage: UsageScope,
    credential: Credential,
    group: GroupSnapshot,
    model_id: str,
    price: Decimal,
    tokens: int | None = None,
    now: datetime | None = None,
) -> MeteredCall:
    """Limits and reservation for one billed call, before its upstream call.

    The rate limits (`request_rate_limits_hit`), for a text call the tokens per minute by its token
    ceiling `tokens` (input ceiling + output limit; None for the image calls, which do not count
    against tpm), and a concurrency slot (429); then the reservation (a wallet hold: 403
    INSUFFICIENT_BALANCE; or the subscription's caps: 403 SUBSCRIPTION_NOT_FOUND / _INVALID, 429
    USAGE_LIMIT_EXCEEDED). Nothing is left held or counted in a token window when this raises.
    """
    if transaction_open_by_application():
        # A transaction here would hold the reservation's row locks for the whole upstream call.
        raise RuntimeError("metered calls must not run inside a database transaction (transaction.atomic)")
    amount = money_parse(price)
    usage.set_target(group=group, model_id=model_id)
    request_rate_limits_hit(credential=credential, group=group)
    token_take = None
    if tokens is not None:
        token_take = token_window_take(
            limit_key=credential.limit_key,
            group_tpm=group.tpm,
            api_key_id=credential.api_key_id,
            key_tpm=credential.limits.tpm,
            tokens=tokens,
        )
    try:
        slot = concurrency_slot_acquire(limit_key=credential.limit_key, limit=group.concurrency)
    except BaseException:
        token_window_give_back(take=token_take)
        raise
    try:
        hold, caps = _reserve(
            credential=credential,
            group=group,
            model_id=model_id,
            amount=amount,
            usage=usage,
            now=now or timezone.now(),
        )
    except BaseException:
        concurrency_slot_release(slot=slot)
        token_window_give_back(take=token_take)
        raise
    return MeteredCall(
        usage=usage, hold=hold, slot=slot, amount=amount, token_take=token_take, subscription_caps=caps
    )


def metered_call(
    *,
    usage: UsageScope,
    credential: Credential,
    group: GroupSnapshot,
    model_id: str,
    price: Decimal,
    call: Callable[[], T],
    charge: Callable[[T], Decimal | None] | None = None,
    tokens: int | None = None,
    now: datetime | None = None,
) -> T:
    """Run `call` (the upstream call) as one billed call of `price`.

    `metered_begin` (limits, then the reservation), then `call()` with no database transaction open
    and no row lock held. On return the hold is captured (charged exactly once, reference = the
    request id), the usage record written with it and `usage.charged` set; on any exception the hold
    is released (nothing charged) and the exception re-raised unchanged. The concurrency slot is given
    back on every exit path.

    `price` is what is reserved. `charge(result)`, when given, says what the call did cost (at most
    the reservation; None: all of it), for calls priced by what they produced (text tokens).

    `tokens`: a text call's token ceiling, for the tokens-per-minute limits (`metered_begin`).

    `now` moves the clock of the reservation (calendar windows, hold expiry); tests use it.
    """
    meter = metered_begin(
        usage=usage,
        credential=credential,
        group=group,
        model_id=model_id,
        price=price,
        tokens=tokens,
        now=now,
    )
    try:
        try:
            connection_release()  # `call` needs no database connection until the capture
            result = call()
        except BaseException:
            meter.release()
            raise
        meter.capture(amount=charge(result) if charge is not None else None)
        return result
    finally:
        meter.close()


def _reserve(
    *,
    credential: Credential,
    group: GroupSnapshot,
    model_id: str,
    amount: Decimal,
    usage: UsageScope,
    now: datetime,
) -> tuple[Hold, dict[str, Decimal | None] | None]:
    """The wallet's or the subscription's hold, and with it, in the same transaction, the count in
    the key's budget window when the credential is an API key with a budget (docs/billing.md, "Key
    budgets"); a key without one costs no statement more. For a subscription hold, its caps per
    window too, which the capture's alerts watch."""
    key_budget = key_budget_for(
        api_key_id=credential.api_key_id,
        budget=credential.limits.budget,
        period=credential.limits.budget_period,
    )
    if group.billing == Group.Billing.SUBSCRIPTION:
        subscription = subscription_resolve_for_call(
            credential=credential, group=group, model_id=model_id, now=now
        )
        hold = subscription_hold_reserve(
            subscription=subscription,
            amount=amount,
            reference=usage.request_id,
            now=now,
            key_budget=key_budget,
        )
        caps = {
            "day": subscription.daily_limit,
            "week": subscription.weekly_limit,
            "month": subscription.monthly_limit,
            "total": subscription.total_limit,
        }
        return hold, caps
    hold = hold_reserve(
        account_id=credential.account.pk,
        amount=amount,
        reference=usage.request_id,
        now=now,
        key_budget=key_budget,
    )
    return hold, None


def _release(*, hold: Hold) -> None:
    """Release after a failed call; if even that fails, the hold expires and release_stale_holds
    voids it, so the original error is what the caller sees."""
    try:
        hold_release(hold=hold)
    except Exception:
        logger.exception("could not release hold %s; release_stale_holds will", hold.pk)
