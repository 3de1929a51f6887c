from django.apps import AppConfig


class UpstreamsConfig(AppConfig):
    name = "upstreams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from core.config_cache import key_changes_watch, local_state_register
        from upstreams.checks import upstream_keys_check
        from upstreams.circuit import CIRCUIT_PREFIX, circuit_key_changed, circuit_views_clear

        # The circuit breaker's per-process view is dropped with the configuration caches, and a view
        # of a circuit ends when Redis reports a change of it.
        local_state_register(circuit_views_clear)
        key_changes_watch(CIRCUIT_PREFIX, circuit_key_changed)
        checks.register(upstream_keys_check, "upstreams", checks.Tags.database)
