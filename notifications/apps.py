from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from billing.models import LedgerEntry
        from core.config_registry import Invalidating, invalidating_register
        from notifications.alerts import balance_floor_rearm

        # The thresholds are cached per process (notifications/thresholds.py); where to deliver and
        # the floor's arming are read when needed. A new row changes the cached answer ("none").
        invalidating_register(
            Invalidating(
                "notifications.AlertSettings",
                fields_not_cached=frozenset(
                    {"webhook_url", "webhook_secret", "email_enabled", "floor_epoch", "updated_at"}
                ),
                new_rows=True,
            )
        )
        # A top-up or adjustment that brings the available balance back to the floor re-arms it.
        post_save.connect(balance_floor_rearm, sender=LedgerEntry, dispatch_uid="notifications_floor_rearm")
