"""Delete hosted images older than the retention period. Run it from cron, e.g. hourly."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from core.commands import BATCH_SIZE_MAX, DAYS_MAX, bounded_int
from images.hosting import hosted_images_purge


class Command(BaseCommand):
    help = "Delete hosted images (files and records) older than GATEWAY_IMAGE_RETENTION_HOURS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-hours",
            type=bounded_int(0, DAYS_MAX * 24),
            default=None,
            help="Override the retention (default: GATEWAY_IMAGE_RETENTION_HOURS).",
        )
        parser.add_argument(
            "--batch-size", type=bounded_int(1, BATCH_SIZE_MAX), default=500, help="Images deleted per batch."
        )

    def handle(self, *args, older_than_hours: int | None, batch_size: int, **options) -> None:
        hours = settings.GATEWAY_IMAGE_RETENTION_HOURS if older_than_hours is None else older_than_hours
        deleted = hosted_images_purge(older_than=timedelta(hours=hours), batch_size=batch_size)
        self.stdout.write(f"Deleted {deleted} hosted image(s) older than {hours} hour(s).")
