from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from chat.response_store import response_store_purge
from core.commands import BATCH_SIZE_MAX, DAYS_MAX, bounded_int


class Command(BaseCommand):
    help = (
        "Delete the kept responses and items of translated /v1/responses answers of each conversation "
        "whose last response is older than GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS (or --days), in batches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        retention = settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS
        parser.add_argument("--days", type=bounded_int(1, DAYS_MAX), default=retention)
        parser.add_argument("--batch-size", type=bounded_int(1, BATCH_SIZE_MAX), default=5000)

    def handle(self, *args: Any, days: Any, batch_size: Any, **options: Any) -> None:
        deleted = response_store_purge(older_than_days=days, batch_size=batch_size)
        self.stdout.write(
            f"Deleted {deleted} kept response(s) and item(s) of conversations idle for more than {days} days."
        )
