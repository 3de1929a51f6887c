from django.core.management.base import BaseCommand, CommandError

from accounts.models import Account
from accounts.selectors import account_get_by_username
from core.commands import DAYS_MAX, bounded_int, text
from keys.credentials import SCOPES
from keys.services import oauth_token_create


class Command(BaseCommand):
    help = (
        "Issue an OAuth access token (sk_oauth_…) for USERNAME with the given scopes. "
        "The token is printed once, alone on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", type=text)
        parser.add_argument(
            "--scopes",
            type=text,
            required=True,
            help=f"Space-separated scopes, from: {', '.join(SCOPES)}.",
        )
        parser.add_argument(
            "--expires-in-seconds",
            type=bounded_int(1, DAYS_MAX * 86_400),
            default=None,
            help="Lifetime; default: the OAuth access token lifetime (OAUTH_ACCESS_TOKEN_EXPIRE_SECONDS).",
        )

    def handle(self, *args, username, scopes, expires_in_seconds, **options):
        try:
            account = account_get_by_username(username=username)
        except Account.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        wanted = scopes.split()
        if not wanted:
            raise CommandError(f"--scopes needs at least one scope, from: {', '.join(SCOPES)}")
        try:
            access_token, secret = oauth_token_create(
                account=account, scopes=wanted, expires_in_seconds=expires_in_seconds
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"Created OAuth access token #{access_token.pk} for {username} with scopes "
            f"{access_token.scope!r}, expiring {access_token.expires.isoformat()}. "
            "It is shown once; store it now."
        )
        self.stdout.write(secret)
