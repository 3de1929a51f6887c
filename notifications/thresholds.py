"""What an account's alerts watch, as the capture of every call reads it: a snapshot cached per
process (core/config_cache.py), so that a capture for an account without a line it could cross costs
no query."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from core.config_cache import GenerationCache
from notifications.models import DEFAULT_PERCENTAGES, AlertSettings


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    """The balance floor (None: none) and the percentages of each key budget and subscription cap."""

    balance_floor: Decimal | None
    percentages: tuple[int, ...]


DEFAULT_THRESHOLDS = AlertThresholds(balance_floor=None, percentages=tuple(DEFAULT_PERCENTAGES))

_thresholds: GenerationCache[AlertThresholds] = GenerationCache(name="alert_thresholds")


def alert_thresholds_get(*, account_id: int) -> AlertThresholds:
    """The account's thresholds: its settings, or the defaults (no floor; 80 % and 100 %)."""
    return _thresholds.get_or_load(account_id, lambda: _alert_thresholds_load(account_id=account_id))


def _alert_thresholds_load(*, account_id: int) -> AlertThresholds:
    row = (
        AlertSettings.objects.filter(account_id=account_id)
        .values_list("balance_floor", "percentages")
        .first()
    )
    if row is None:
        return DEFAULT_THRESHOLDS
    floor, percentages = row
    return AlertThresholds(balance_floor=floor, percentages=tuple(sorted({int(p) for p in percentages})))
