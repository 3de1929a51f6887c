"""What the management commands share: number options with the range they may take, and text
arguments that must be text.

A number outside its range (a retention of 10^30 days, a batch of 2^63 rows) would otherwise fail
deep inside as a traceback: a date out of range, an integer the database cannot take. An argument
whose bytes are not UTF-8 reaches Python holding lone surrogates, which neither the database nor the
command's output can take. Checked by argparse instead, each is the command's usage error, naming
the argument (exit 2; CommandError from call_command).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

BATCH_SIZE_MAX = 100_000
DAYS_MAX = 36_500  # a hundred years
N = TypeVar("N", int, float)


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse `type` taking a whole number from `low` to `high`."""
    return _bounded(int, "a whole number", low, high)


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """An argparse `type` taking a number from `low` to `high` (neither infinite nor NaN)."""
    return _bounded(float, "a number", low, high)


def _bounded(kind: Callable[[str], N], name: str, low: N, high: N) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {name}") from None
        if not low <= value <= high:  # NaN compares false: refused too
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {text}")
        return value

    return parse


def text(value: str) -> str:
    """An argparse `type` for an argument kept or shown (a username, a label, a note): valid UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("is not valid UTF-8 text") from None
    return value
