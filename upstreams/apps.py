from django.apps import AppConfig


class UpstreamsConfig(AppConfig):
    name = "upstreams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from core.config_cache import local_state_register
        from upstreams.checks import upstream_keys_check
        from upstreams.circuit import circuit_views_clear

        # The circuit breaker's per-process view is dropped with the configuration caches.
        local_state_register(circuit_views_clear)
        checks.register(upstream_keys_check, "upstreams")
