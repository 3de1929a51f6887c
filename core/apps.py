from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Gateway core"

    def ready(self) -> None:
        # Importing the configuration cache connects its per-request generation memo and the push
        # watch's signals; the apps register their invalidating models (core/config_registry.py).
        import core.config_cache  # noqa: F401
