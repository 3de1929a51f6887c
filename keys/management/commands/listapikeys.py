from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.models import Account
from accounts.selectors import account_get_by_username
from keys.selectors import api_keys_list


def _when(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") if moment is not None else "-"


class Command(BaseCommand):
    help = (
        "List API keys (all accounts', or USERNAME's): prefix, label, owner, group, created, last used, "
        "expiry and state. Secrets are never stored, so never shown."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?")

    def handle(self, *args, username, **options):
        account = None
        if username is not None:
            try:
                account = account_get_by_username(username=username)
            except Account.DoesNotExist as exc:
                raise CommandError(str(exc)) from None
        rows = [
            (
                str(api_key.pk),
                f"{api_key.prefix}…",
                api_key.label or "-",
                api_key.account.user.get_username(),
                api_key.group.name,
                _when(api_key.created_at),
                _when(api_key.last_used_at),
                _when(api_key.expires_at),
                api_key.status,
            )
            for api_key in api_keys_list(account=account)
        ]
        if not rows:
            self.stderr.write("No API keys.")
            return
        header = ("ID", "PREFIX", "LABEL", "USER", "GROUP", "CREATED", "LAST USED", "EXPIRES", "STATE")
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write(
                "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            )
