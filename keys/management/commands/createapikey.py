from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.models import Account
from accounts.selectors import account_get_by_username
from groups.models import Group
from keys.services import ApiKeyGroupNotAllowed, api_key_create


class Command(BaseCommand):
    help = (
        "Create an API key for USERNAME bound to one of the account's allowed groups. "
        "The key is printed once, alone on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--group", required=True, help="Group name the key is bound to.")
        parser.add_argument("--label", default="")
        parser.add_argument("--expires-in-days", type=int, default=None)

    def handle(self, *args, username, group, label, expires_in_days, **options):
        try:
            account = account_get_by_username(username=username)
        except Account.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        try:
            bound_group = Group.objects.get(name=group)
        except Group.DoesNotExist:
            raise CommandError(f"no group named {group!r}") from None
        if expires_in_days is not None and expires_in_days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        try:
            api_key, secret = api_key_create(
                account=account, group=bound_group, label=label, expires_at=expires_at
            )
        except ApiKeyGroupNotAllowed as exc:
            raise CommandError(f"{exc}; allow it for the account first") from None
        self.stderr.write(
            f"Created key {api_key.prefix}… for {username} in group {bound_group.name}. "
            "It is shown once; store it now."
        )
        self.stdout.write(secret)
