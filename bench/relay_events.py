#!/usr/bin/env python3
"""CPU per relayed event in-process: what a stream relay does with each read of the upstream, without
sockets, for each streamed family, with and without the tracker's skim.

    DATABASE_URL= .venv/bin/python bench/relay_events.py [--deltas 200] [--streams 100] [--repeat 5]

Each family's stream is what bench/text_upstream.py sends for --deltas text deltas (the wire format
of upstreams/text_shapes.py in compact JSON, as the providers write it). Its bytes are handed to
upstreams.sse.sse_events in reads of 1, 3 and 5 events (a worker that keeps up reads one event at a
time; one that falls behind finds several waiting), and every event goes through the family's tracker
and into the batch of bytes the relay writes, as chat/streaming.py does. Reported: µs per event, the
best of --repeat runs of --streams streams.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")

import django  # noqa: E402

django.setup()

from bench.text_upstream import CHAT, DELTAS, MESSAGES, RESPONSES, Answer, sse_data, sse_named  # noqa: E402
from chat.families import ChatCompletionsTracker, MessagesTracker, ResponsesTracker, StreamTracker  # noqa: E402
from upstreams import text_shapes  # noqa: E402
from upstreams.sse import sse_events  # noqa: E402


def stream(path: str, deltas: int) -> list[bytes]:
    """The events of one streamed answer as bench/text_upstream.py writes them, each as its bytes."""
    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    answer = Answer(path, {**body, "stream_options": {"include_usage": True}}, deltas)
    events = answer.events(tuple(DELTAS[k % 2] for k in range(answer.n)))
    if path == CHAT:
        return [*map(sse_data, events), b"data: " + text_shapes.CHAT_DONE.encode() + b"\n\n"]
    return list(map(sse_named, events))


def streams(deltas: int) -> dict[str, tuple[type[StreamTracker], list[bytes]]]:
    return {
        "chat": (ChatCompletionsTracker, stream(CHAT, deltas)),
        "responses": (ResponsesTracker, stream(RESPONSES, deltas)),
        "messages": (MessagesTracker, stream(MESSAGES, deltas)),
    }


class Reads:
    """A streamed reply as sse_events reads it: `chunks` yields the given reads."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    def chunks(self, size: int) -> Iterator[bytes]:
        return iter(self.reads)


def relay(reads: list[bytes], tracker: StreamTracker, skim: Callable[[bytes], bool] | None) -> list[bytes]:
    """The relay's work per event (chat/streaming.py): note its output, feed, batch, one write per read."""
    written, batch = [], []
    for event in sse_events(Reads(reads), comments=True, skim=skim):  # type: ignore[arg-type]
        if not event.comment:
            tracker.received.take(event.raw)
        if event.comment or event.skimmed or tracker.feed(event):
            batch.append(event.raw)
        if batch and not event.more:
            written.append(batch[0] if len(batch) == 1 else b"".join(batch))
            batch = []
    return written


def per_event_us(tracker_class: type[StreamTracker], events: list[bytes], *, per_read: int, skimming: bool,
                 streams: int, repeat: int) -> float:  # fmt: skip
    reads = [b"".join(events[i : i + per_read]) for i in range(0, len(events), per_read)]
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(streams):
            tracker = tracker_class(usage_asked=True)
            written = relay(reads, tracker, tracker.skim if skimming else None)
            if not tracker.complete or b"".join(written) != b"".join(events):
                raise SystemExit("the relay lost or changed events")
        best = min(best, time.perf_counter() - started)
    return best / (streams * len(events)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"Python {sys.version.split()[0]}; {args.deltas} deltas a stream; µs per event, best of {args.repeat}"
    )
    print("| family | events a read | parsed one by one | skimmed |")
    print("|---|---:|---:|---:|")
    for family, (tracker_class, events) in streams(args.deltas).items():
        for per_read in (1, 3, 5):
            figures = [
                per_event_us(
                    tracker_class, events, per_read=per_read, skimming=skimming, streams=args.streams,
                    repeat=args.repeat,
                )
                for skimming in (False, True)
            ]  # fmt: skip
            print(f"| {family} | {per_read} | {figures[0]:.2f} | {figures[1]:.2f} |")


if __name__ == "__main__":
    main()
