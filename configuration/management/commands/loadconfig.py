from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from configuration.loader import ConfigError, config_load


class Command(BaseCommand):
    help = (
        "Create or update upstreams, groups, image and text models, accounts and subscriptions "
        "from a TOML file."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):
        try:
            summary = config_load(path=file)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        for line in summary.lines():
            self.stdout.write(line)
        self.stdout.write(
            self.style.SUCCESS(f"{file}: applied" if summary.changed else f"{file}: no changes")
        )
