from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.services import NOTIFICATION_RETENTION_DAYS, notifications_purge


class Command(BaseCommand):
    help = (
        f"Delete delivered, failed and skipped notifications older than {NOTIFICATION_RETENTION_DAYS} "
        "days (or --days), in batches; pending ones are kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=NOTIFICATION_RETENTION_DAYS)
        parser.add_argument("--batch-size", type=int, default=5000)

    def handle(self, *args: Any, days: Any, batch_size: Any, **options: Any) -> None:
        if days < 1:
            raise CommandError("--days must be at least 1")
        deleted = notifications_purge(older_than_days=days, batch_size=max(1, batch_size))
        self.stdout.write(f"Deleted {deleted} settled notification(s) older than {days} days.")
