#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import secrets
import sys

# Commands that read only the models and the migration files, or copy the static files: they sign
# nothing and hash no key, so they run on a bare checkout (a CI job checking for missing migrations,
# an image build collecting static files) without the secrets that serving and every other command
# require (gateway_project/settings.py).
_SECRET_FREE_COMMANDS = frozenset({"makemigrations", "showmigrations", "sqlmigrate", "collectstatic"})


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    if len(sys.argv) > 1 and sys.argv[1] in _SECRET_FREE_COMMANDS:
        # Throwaway values for this process only, where the environment has none: never used.
        for name in ("SECRET_KEY", "GATEWAY_KEY_PEPPER"):
            if not os.environ.get(name):
                os.environ[name] = secrets.token_urlsafe(32)
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad environment is an operator error: say what is wrong, without a traceback.
        sys.stderr.write(f"Configuration error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
