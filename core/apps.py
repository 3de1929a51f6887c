from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Gateway core"

    def ready(self) -> None:
        # Connects the per-request memo of the configuration generation to request_started/finished.
        from core import config_cache  # noqa: F401
