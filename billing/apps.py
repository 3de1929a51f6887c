from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from accounts.signals import account_provisioned
        from billing.ledger import wallet_create_on_provision

        account_provisioned.connect(wallet_create_on_provision, dispatch_uid="billing_wallet_create")
