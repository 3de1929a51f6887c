"""bench/relay_events.py measures the relay's per-event work on the streams the bench's fake upstream
sends: a functional check that each family's stream goes through, skimmed or not, whole and complete
(the bench itself refuses to report a figure otherwise). No timing is asserted."""

from __future__ import annotations

import pytest

from bench import relay_events


@pytest.mark.parametrize("family", ["chat", "responses", "messages"])
@pytest.mark.parametrize("per_read", [1, 3])
def test_each_familys_bench_stream_is_relayed_whole_skimmed_or_not(family, per_read):
    tracker_class, events = relay_events.streams(4)[family]

    for skimming in (False, True):
        tracker = tracker_class(usage_asked=True)
        reads = [b"".join(events[i : i + per_read]) for i in range(0, len(events), per_read)]
        written = relay_events.relay(reads, tracker, tracker.skim if skimming else None)

        assert b"".join(written) == b"".join(events)
        assert len(written) == len(reads)  # one write per read
        assert tracker.complete and tracker.tokens is not None and tracker.tokens.output == 4


def test_runs_of_deltas_in_the_bench_streams_are_skimmed():
    for tracker_class, events in relay_events.streams(6).values():
        deltas = [event for event in events if b'"tok ' in event or b'"ken ' in event][1:4]
        assert tracker_class(usage_asked=True).skim(b"".join(deltas)) is True
