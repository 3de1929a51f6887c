"""JSON bodies of billing data that more than one endpoint answers: `GET /v1/me` and the provisioning
API's usage (`/v1/admin/accounts/<id>/usage`) show usage totals in the same shape; an API key's
limits and its budget window are shown as `GET /v1/me` answers them."""

from __future__ import annotations

from typing import Any

from billing.money import money_str
from billing.selectors import KeyBudgetWindow, UsageTotals
from keys.credentials import KeyLimits


def usage_totals_body(totals: UsageTotals) -> dict[str, Any]:
    """Calls, cost (an exact decimal string, as the API writes money) and tokens of a period."""
    return {
        "calls": totals.calls,
        "amount": money_str(totals.amount),
        "input_tokens": totals.input_tokens,
        "cached_tokens": totals.cached_tokens,
        "cache_write_tokens": totals.cache_write_tokens,
        "output_tokens": totals.output_tokens,
    }


def api_key_limits_body(limits: KeyLimits) -> dict[str, Any]:
    """An API key's own limits: null (or an empty list) where unset; the budget a decimal string."""
    return {
        "budget": None if limits.budget is None else money_str(limits.budget),
        "budget_period": limits.budget_period or None,
        "models": sorted(limits.model_ids),
        "rpm": limits.rpm,
        "tpm": limits.tpm,
        "allowed_ips": [str(network) for network in limits.allowed_networks],
    }


def budget_window_body(window: KeyBudgetWindow) -> dict[str, Any]:
    """The key's current budget window: when it started and ends (null: the total never ends), what
    it has used (calls in flight included) and what remains."""
    return {
        "start": window.start.isoformat(),
        "end": None if window.ends_at is None else window.ends_at.isoformat(),
        "used": money_str(window.used),
        "remaining": money_str(window.remaining),
    }
