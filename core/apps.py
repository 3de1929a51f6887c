from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Gateway core"

    def ready(self) -> None:
        # Every write that changes a cached answer invalidates the configuration caches (the one list
        # is in core/config_cache.py); importing it also connects the per-request generation memo.
        from core.config_cache import invalidation_receivers_connect

        invalidation_receivers_connect()
