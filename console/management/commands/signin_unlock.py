from django.core.management.base import BaseCommand, CommandError

from console.signin import signin_unlock
from core.commands import text


class Command(BaseCommand):
    help = (
        "Lift the failed sign-in throttle of a username and/or a client address now, instead of at the "
        "end of its window (GATEWAY_SIGNIN_WINDOW_SECONDS)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?", type=text, default="")
        parser.add_argument(
            "--address", type=text, default="", help="A client address (as REMOTE_ADDR has it)."
        )

    def handle(self, *args, username, address, **options):
        if not username and not address:
            raise CommandError("Name a username, an --address, or both.")
        freed = signin_unlock(username=username, address=address)
        self.stdout.write(f"Gave back {freed} failed sign-in(s); the next sign-in is checked at once.")
