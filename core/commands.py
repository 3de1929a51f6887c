"""What the management commands share: whole-number options with the range they may take.

A number outside it (a retention of 10^30 days, a batch of 2^63 rows) would otherwise fail deep
inside as a traceback: a date out of range, an integer the database cannot take. Checked by argparse
instead, it is the command's usage error, naming the option (exit 2; CommandError from call_command).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

BATCH_SIZE_MAX = 100_000
DAYS_MAX = 36_500  # a hundred years


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse `type` taking a whole number from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse
