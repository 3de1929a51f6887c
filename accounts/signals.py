"""What accounts tells the apps above it, which it does not import."""

from django.dispatch import Signal

# Sent by `account_create_for_user` inside its transaction, with `account`: billing gives the account
# its wallet (billing/apps.py), so every account made through the services has one.
account_provisioned = Signal()
