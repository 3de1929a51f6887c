from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from billing.holds import holds_release_owner
from billing.limits import concurrency_slots_release_owner
from core.commands import text


class Command(BaseCommand):
    help = (
        "A worker process died (gunicorn.conf.py's child_exit runs this): give back its concurrency "
        "slots and release its open holds now, instead of when their leases and TTLs end. OWNER is "
        "`<instance>:<pid>` (core/process_identity.py)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("owner", type=text)

    def handle(self, *args: Any, owner: Any, **options: Any) -> None:
        slots = concurrency_slots_release_owner(owner=owner)
        holds = holds_release_owner(owner=owner)
        self.stdout.write(
            f"Process {owner}: gave back {slots} concurrency slot(s), released {holds} hold(s)."
        )
