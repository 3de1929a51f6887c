"""Delete hosted images older than the retention period. Run it from cron, e.g. hourly."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from images.hosting import hosted_images_purge


class Command(BaseCommand):
    help = "Delete hosted images (files and records) older than GATEWAY_IMAGE_RETENTION_HOURS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-hours",
            type=int,
            default=None,
            help="Override the retention (default: GATEWAY_IMAGE_RETENTION_HOURS).",
        )
        parser.add_argument("--batch-size", type=int, default=500, help="Images deleted per batch.")

    def handle(self, *args, older_than_hours: int | None, batch_size: int, **options) -> None:
        hours = settings.GATEWAY_IMAGE_RETENTION_HOURS if older_than_hours is None else older_than_hours
        if hours < 0 or batch_size < 1:
            self.stderr.write("--older-than-hours must be >= 0 and --batch-size >= 1.")
            raise SystemExit(2)
        deleted = hosted_images_purge(older_than=timedelta(hours=hours), batch_size=batch_size)
        self.stdout.write(f"Deleted {deleted} hosted image(s) older than {hours} hour(s).")
