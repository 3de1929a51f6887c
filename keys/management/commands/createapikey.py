from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.models import Account
from accounts.selectors import account_get_by_username
from core.commands import DAYS_MAX, bounded_int, text
from groups.models import Group
from keys.errors import KeyLimitsInvalid
from keys.models import ApiKey
from keys.services import (
    ApiKeyGroupNotAllowed,
    ApiKeyLimitsInput,
    api_key_create,
    api_key_limits_clean,
    api_key_models_check,
)

# A limit's name in api_key_limits_clean's refusals (`param`) → this command's flag.
LIMIT_FLAGS = {
    "budget": "--budget",
    "budget_period": "--budget-period",
    "models": "--models",
    "rpm": "--rpm",
    "tpm": "--tpm",
    "allowed_ips": "--allowed-ips",
}


def _listed(text: str | None) -> list[str]:
    """A comma-separated flag value as its items."""
    return [item.strip() for item in (text or "").split(",") if item.strip()]


class Command(BaseCommand):
    help = (
        "Create an API key for USERNAME bound to one of the account's allowed groups, with optional "
        "limits of its own. The key is printed once, alone on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", type=text)
        parser.add_argument("--group", type=text, required=True, help="Group name the key is bound to.")
        parser.add_argument("--label", type=text, default="")
        parser.add_argument("--expires-in-days", type=bounded_int(1, DAYS_MAX), default=None)
        parser.add_argument(
            "--budget", type=text, default=None, help='The most the key may spend per period, e.g. "5.00".'
        )
        parser.add_argument(
            "--budget-period",
            type=text,
            default="",
            help=f"The budget's window: {', '.join(ApiKey.BudgetPeriod.values)}.",
        )
        parser.add_argument(
            "--models",
            type=text,
            default=None,
            help="Comma-separated model ids of the group the key may call.",
        )
        parser.add_argument("--rpm", type=int, default=None, help="Requests per minute.")
        parser.add_argument("--tpm", type=int, default=None, help="Tokens per minute of text calls.")
        parser.add_argument(
            "--allowed-ips",
            type=text,
            default=None,
            help="Comma-separated CIDR networks the caller must call from.",
        )

    def handle(self, *args, username, group, label, expires_in_days, **options):
        try:
            account = account_get_by_username(username=username)
        except Account.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        try:
            bound_group = Group.objects.get(name=group)
        except Group.DoesNotExist:
            raise CommandError(f"no group named {group!r}") from None
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        limits = ApiKeyLimitsInput(
            budget=options["budget"],
            budget_period=options["budget_period"],
            model_ids=_listed(options["models"]),
            rpm=options["rpm"],
            tpm=options["tpm"],
            allowed_ips=_listed(options["allowed_ips"]),
        )
        try:
            api_key_limits_clean(limits=limits)
            api_key_models_check(group_id=bound_group.pk, model_ids=limits.model_ids)
            api_key, secret = api_key_create(
                account=account, group=bound_group, label=label, expires_at=expires_at, limits=limits
            )
        except KeyLimitsInvalid as exc:
            flag = LIMIT_FLAGS.get(exc.param or "", f"--{exc.param}")
            raise CommandError(f"{flag}: {exc.message}") from None
        except ApiKeyGroupNotAllowed as exc:
            raise CommandError(f"{exc}; allow it for the account first") from None
        self.stderr.write(
            f"Created key {api_key.prefix}… for {username} in group {bound_group.name}. "
            "It is shown once; store it now."
        )
        self.stdout.write(secret)
