from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save

from core.config_cache import config_generation_bump_on_commit


def _upstream_changed(**_: object) -> None:
    # Cached upstream lists (upstreams/routing.py) hold these rows: every process must read them
    # again once this write is committed.
    config_generation_bump_on_commit()


class UpstreamsConfig(AppConfig):
    name = "upstreams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core.config_cache import local_state_register
        from upstreams.circuit import circuit_views_clear
        from upstreams.models import Upstream

        local_state_register(circuit_views_clear)
        post_save.connect(_upstream_changed, sender=Upstream, dispatch_uid="upstreams_upstream_saved")
        post_delete.connect(_upstream_changed, sender=Upstream, dispatch_uid="upstreams_upstream_deleted")
