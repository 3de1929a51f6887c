"""`make run`'s keys and hints (scripts/run_demo.py): the facts it prints, as one JSON object."""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.models import Account
from accounts.selectors import account_get_by_username
from groups.models import Group
from keys.selectors import api_key_get_by_secret
from keys.services import api_key_create

DEMO_USERNAME = "demo"
# (group, label) of each key `make run` prints: a key is bound to one group, and the text models are
# in Demo-Chat.
DEMO_KEYS = (("Alpha-Image", "make run"), ("Demo-Chat", "make run (text)"))


def demo_keys_ensure(*, path: Path) -> dict[str, object]:
    """The demo account's keys, one per DEMO_KEYS group, reused from `path` while each still verifies
    (its secret finds an active key of that group and account), else created and written back to
    `path` (mode 600: it holds secrets). Returns {"keys": {group: secret}, "created": [group, ...],
    "needs_password": bool, "needs_superuser": bool}: the hints that still apply."""
    account = account_get_by_username(username=DEMO_USERNAME)
    stored = _read(path)
    keys: dict[str, str] = {}
    created: list[str] = []
    for group_name, label in DEMO_KEYS:
        secret = stored.get(group_name, "")
        api_key = api_key_get_by_secret(secret=secret) if secret else None
        usable = (
            api_key is not None
            and api_key.status == "active"
            and api_key.account_id == account.pk
            and api_key.group.name == group_name
        )
        if not usable:
            _, secret = api_key_create(account=account, group=Group.objects.get(name=group_name), label=label)
            created.append(group_name)
        keys[group_name] = secret
    if keys != stored:
        _write(path, keys)
    return {
        "keys": keys,
        "created": created,
        "needs_password": not account.user.has_usable_password(),
        "needs_superuser": not get_user_model().objects.filter(is_superuser=True).exists(),
    }


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write(path: Path, keys: dict[str, str]) -> None:
    # Created with mode 600 from the start: the secrets are never readable by others, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(keys, file, indent=2)
        file.write("\n")
    path.chmod(0o600)


class Command(BaseCommand):
    help = (
        "For `make run`: reuse the demo account's keys stored in FILE while they still verify (else create "
        "and store new ones) and print, as JSON, the keys and which setup hints still apply."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file, **options):
        try:
            facts = demo_keys_ensure(path=file)
        except (Account.DoesNotExist, Group.DoesNotExist) as exc:
            raise CommandError(f"{exc}; load config/demo.toml first") from None
        self.stdout.write(json.dumps(facts))
