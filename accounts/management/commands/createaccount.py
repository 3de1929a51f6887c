from django.core.management.base import BaseCommand, CommandError

from accounts.services import AccountExists, AccountGroupInactive, account_open
from core.commands import text
from groups.models import Group
from groups.selectors import group_get_by_reference


class Command(BaseCommand):
    help = (
        "Create a user with its account and empty wallet, allowed to use the given groups. The user has "
        "no password until one is set (manage.py changepassword USERNAME)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", type=text)
        parser.add_argument(
            "--groups",
            nargs="+",
            required=True,
            type=text,
            metavar="GROUP",
            help="Allowed groups, by name or id.",
        )
        parser.add_argument(
            "--current",
            type=text,
            metavar="GROUP",
            help="The current group (default: the first of --groups).",
        )
        parser.add_argument("--email", type=text, default="")

    def handle(self, *args, username, groups, current, email, **options):
        try:
            allowed = [group_get_by_reference(reference=reference) for reference in groups]
            current_group = group_get_by_reference(reference=current) if current else allowed[0]
        except Group.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        if current_group not in allowed:
            raise CommandError(f"--current {current!r} is not among --groups")
        try:
            account = account_open(
                username=username, email=email, allowed_groups=allowed, current_group=current_group
            )
        except (AccountExists, AccountGroupInactive) as exc:
            raise CommandError(str(exc)) from None
        names = ", ".join(group.name for group in allowed)
        self.stdout.write(
            f"Created account {account} (groups: {names}; current: {current_group.name}). "
            f"Set a password with: manage.py changepassword {username}"
        )
