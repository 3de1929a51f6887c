"""How long a worker took to start its calls lately (core/overload.py): the longest start of the
current and the previous window, noted once per call, from its arrival to its upstream request."""

from __future__ import annotations

import time

import pytest

from core import overload
from core.overload import (
    REMEMBERED_SECONDS,
    _Starts,
    call_arrived,
    call_ended,
    call_start_paused,
    call_started,
    start_delay,
)


def test_the_longest_start_counts_for_its_window_and_the_next_then_lapses():
    starts = _Starts()
    at = 100 * REMEMBERED_SECONDS
    starts.note(0.2, at)
    starts.note(0.7, at + 0.1)
    starts.note(0.3, at + 0.2)

    assert starts.longest(at + 0.5) == 0.7
    assert starts.longest(at + REMEMBERED_SECONDS + 0.5) == 0.7  # the previous window
    assert starts.longest(at + 2 * REMEMBERED_SECONDS + 0.5) == 0.0


def test_a_gap_of_more_than_a_window_forgets_the_old_starts():
    starts = _Starts()
    at = 100 * REMEMBERED_SECONDS
    starts.note(0.9, at)
    starts.note(0.1, at + 3 * REMEMBERED_SECONDS)

    assert starts.longest(at + 3 * REMEMBERED_SECONDS) == 0.1


@pytest.fixture
def starts(monkeypatch) -> _Starts:
    """This process's record of starts, empty (it is the process's: other tests' calls are in it)."""
    fresh = _Starts()
    monkeypatch.setattr(overload, "_starts", fresh)
    monkeypatch.setattr(overload, "_waiting", {})
    return fresh


def test_a_call_is_noted_once_from_its_arrival_and_a_request_that_is_not_a_call_not_at_all(starts):

    call_arrived(counted=True)
    time.sleep(0.05)
    call_started()
    first = starts.longest(time.monotonic())
    time.sleep(0.05)
    call_started()  # a failover's next attempt: the same call

    assert 0.05 <= first < 0.5
    assert starts.longest(time.monotonic()) == first

    call_arrived(counted=False)  # a read, or the console
    time.sleep(0.6)
    call_started()
    assert starts.longest(time.monotonic()) == first


def test_a_call_still_waiting_to_start_counts_by_its_wait_so_far_until_it_ends(starts):
    call_arrived(counted=True)
    time.sleep(0.3)

    assert start_delay() >= 0.3  # nothing started yet: the oldest waiting call says it
    assert starts.longest(time.monotonic()) == 0

    call_ended()  # refused before its upstream call, say
    assert start_delay() == 0


def test_a_wait_on_a_server_the_caller_named_is_neither_waiting_nor_counted_in_the_start(starts):
    call_arrived(counted=True)
    time.sleep(0.05)
    with call_start_paused():  # an image downloaded from the caller's link
        time.sleep(0.6)
        assert start_delay() < 0.3  # not waiting on this process meanwhile

    assert 0.05 <= start_delay() < 0.3  # waiting again, from its arrival less the pause
    call_started()
    assert 0.05 <= starts.longest(time.monotonic()) < 0.3
    call_ended()
    with call_start_paused():  # outside a call: nothing to pause
        pass
    assert start_delay() < 0.3
