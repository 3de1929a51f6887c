from django.core.management.base import BaseCommand, CommandError

from keys.models import ApiKey
from keys.selectors import ApiKeyAmbiguous, api_key_get_by_reference
from keys.services import api_key_revoke


class Command(BaseCommand):
    help = (
        "Revoke one API key, named by its whole secret (a leaked key pasted as is), its prefix "
        "(sk-AbCd1234, as listapikeys shows it) or its id. Every process refuses it at its next request."
    )

    def add_arguments(self, parser):
        parser.add_argument("key", metavar="KEY_OR_PREFIX_OR_ID")

    def handle(self, *args, key, **options):
        try:
            api_key = api_key_get_by_reference(reference=key)
        except ApiKey.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        except ApiKeyAmbiguous as exc:
            listed = "\n".join(
                f"  {match.pk}  {match.prefix}…  {match.label or '-'}  "
                f"{match.account.user.get_username()}  {match.status}"
                for match in exc.matches
            )
            raise CommandError(f"{exc}; give more of the prefix, or the id:\n{listed}") from None
        described = (
            f"{api_key.prefix}… ({api_key.label or 'no label'}) of {api_key.account.user.get_username()}"
        )
        if api_key_revoke(api_key=api_key):
            self.stdout.write(f"Revoked {described}.")
        else:
            self.stdout.write(f"{described} was already revoked.")
