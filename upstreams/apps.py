from django.apps import AppConfig


class UpstreamsConfig(AppConfig):
    name = "upstreams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from core.config_cache import local_state_register
        from core.config_registry import Invalidating, invalidating_register
        from core.config_watch import key_changes_watch
        from upstreams.checks import upstream_keys_check
        from upstreams.circuit import CIRCUIT_PREFIX, circuit_key_changed, circuit_views_clear

        # Routing: every upstream is listed, so a new one invalidates too.
        invalidating_register(Invalidating("upstreams.Upstream", new_rows=True))
        # The circuit breaker's per-process view is dropped with the configuration caches, and a view
        # of a circuit ends when Redis reports a change of it.
        local_state_register(circuit_views_clear)
        key_changes_watch(CIRCUIT_PREFIX, circuit_key_changed)
        checks.register(upstream_keys_check, "upstreams", checks.Tags.database)
