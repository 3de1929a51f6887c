"""JSON bodies of billing data that more than one endpoint answers: `GET /v1/me` and the provisioning
API's usage (`/v1/admin/accounts/<id>/usage`) show usage totals in the same shape."""

from __future__ import annotations

from typing import Any

from billing.money import money_str
from billing.selectors import UsageTotals


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
