from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from billing.holds import holds_release_stale
from core.commands import BATCH_SIZE_MAX, bounded_int


class Command(BaseCommand):
    help = (
        "Release holds whose expiry has passed (their worker died between reserve and capture). "
        "Safe to run from cron on many machines at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=bounded_int(1, BATCH_SIZE_MAX), default=500)

    def handle(self, *args: Any, batch_size: Any, **options: Any) -> None:
        released = holds_release_stale(batch_size=batch_size)
        self.stdout.write(f"Released {released} stale hold(s).")
