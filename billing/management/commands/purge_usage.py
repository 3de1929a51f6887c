from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from billing.idempotency import idempotency_records_purge
from billing.usage import usage_records_purge
from core.commands import BATCH_SIZE_MAX, DAYS_MAX, bounded_int


class Command(BaseCommand):
    help = (
        "Delete usage records older than GATEWAY_USAGE_RETENTION_DAYS (or --days), in batches, and "
        "expired idempotency keys."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=bounded_int(1, DAYS_MAX),
            default=None,
            help="Retention in days (default: setting).",
        )
        parser.add_argument("--batch-size", type=bounded_int(1, BATCH_SIZE_MAX), default=5000)

    def handle(self, *args: Any, days: Any, batch_size: Any, **options: Any) -> None:
        retention = days if days is not None else settings.GATEWAY_USAGE_RETENTION_DAYS
        usage = usage_records_purge(older_than_days=retention, batch_size=batch_size)
        keys = idempotency_records_purge(batch_size=batch_size)
        self.stdout.write(
            f"Deleted {usage} usage record(s) older than {retention} days and {keys} expired "
            "idempotency key(s)."
        )
