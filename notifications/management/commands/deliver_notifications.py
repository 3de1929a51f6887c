import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from core.commands import BATCH_SIZE_MAX, bounded_float, bounded_int
from notifications.delivery import notifications_deliver_due


class Command(BaseCommand):
    help = (
        "Send the alert notifications of the outbox (webhook, email) with retries and backoff: a "
        "long-running worker (SIGTERM stops it after the event it is sending), or one round with --once. "
        "Several may run at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="one round, then exit (cron, tests)")
        parser.add_argument(
            "--interval", type=bounded_float(0.1, 3600), default=5.0, help="seconds between rounds"
        )
        parser.add_argument("--batch-size", type=bounded_int(1, BATCH_SIZE_MAX), default=50)

    def handle(self, *args: Any, once: bool, interval: float, batch_size: int, **options: Any) -> None:
        stop = threading.Event()
        if not once:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: stop.set())
        while True:
            counts = notifications_deliver_due(limit=batch_size, stopping=stop.is_set)
            if once:
                self.stdout.write(
                    f"Delivered {counts.delivered}, retrying {counts.retried}, failed {counts.failed}, "
                    f"skipped {counts.skipped} notification(s)."
                )
                return
            # A full batch: more may be due at once; otherwise wait for the next round.
            busy = counts.delivered + counts.retried + counts.failed + counts.skipped >= batch_size
            close_old_connections()  # a worker lives long: give back a connection the server dropped
            if stop.wait(0 if busy else interval):
                return
