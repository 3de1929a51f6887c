"""What a text call may cost (its hold) and what it did cost (its charge), in exact Decimal money.

Prices are ¥ per million tokens. The charge is rounded up at the 8th decimal place (never to zero),
and never exceeds the hold: the capture is cut to it (billing.holds.hold_capture).
"""

from __future__ import annotations

from decimal import Decimal

from billing.money import money_round_up
from billing.usage import TokenCounts
from chat.snapshots import TextModelSnapshot

PER = Decimal(1_000_000)


def text_call_ceiling(*, text_model: TextModelSnapshot, input_tokens: int, output_tokens: int) -> Decimal:
    """The most a call can cost: its input ceiling at the highest input-side price (a token may turn
    out to be a cache write, priced above plain input) plus its output limit at the output price."""
    input_price = max(
        text_model.input_price,
        text_model.cached_input_price,
        text_model.cache_write_price,
        text_model.cache_write_1h_price,
    )
    return money_round_up((input_tokens * input_price + output_tokens * text_model.output_price) / PER)


def text_call_cost(*, text_model: TextModelSnapshot, tokens: TokenCounts) -> Decimal:
    """The exact cost of the tokens the upstream reported, by kind of token (the cache writes to a
    one-hour cache at their own price, the rest of the writes at the five-minute one)."""
    one_hour = min(tokens.cache_write_1h, tokens.cache_write)
    return money_round_up(
        (
            tokens.input * text_model.input_price
            + tokens.cached * text_model.cached_input_price
            + (tokens.cache_write - one_hour) * text_model.cache_write_price
            + one_hour * text_model.cache_write_1h_price
            + tokens.output * text_model.output_price
        )
        / PER
    )
