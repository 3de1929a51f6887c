from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.commands import BATCH_SIZE_MAX, DAYS_MAX, bounded_int
from notifications.services import NOTIFICATION_RETENTION_DAYS, notifications_purge


class Command(BaseCommand):
    help = (
        f"Delete delivered, failed and skipped notifications older than {NOTIFICATION_RETENTION_DAYS} "
        "days (or --days), in batches; pending ones are kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=bounded_int(1, DAYS_MAX), default=NOTIFICATION_RETENTION_DAYS)
        parser.add_argument("--batch-size", type=bounded_int(1, BATCH_SIZE_MAX), default=5000)

    def handle(self, *args: Any, days: Any, batch_size: Any, **options: Any) -> None:
        deleted = notifications_purge(older_than_days=days, batch_size=batch_size)
        self.stdout.write(f"Deleted {deleted} settled notification(s) older than {days} days.")
