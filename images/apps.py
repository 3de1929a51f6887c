from django.apps import AppConfig
from django.db.models.signals import m2m_changed, post_delete, post_save

from gateway_project.generations import config_generation_bump_on_commit


def _routing_changed(**_: object) -> None:
    # Cached model resolutions (groups/selectors.py) and upstream lists (images/routing.py) hold these
    # rows: every process must read them again once this write is committed.
    config_generation_bump_on_commit()


def _model_upstreams_changed(*, action: str, **_: object) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        _routing_changed()


class ImagesConfig(AppConfig):
    name = "images"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from gateway_project.generations import local_state_register
        from images.circuit import circuit_views_clear
        from images.models import ImageModel, Upstream

        local_state_register(circuit_views_clear)

        # Not HostedImage: it is written by calls, and no cached answer depends on it.
        for model in (ImageModel, Upstream):
            label = model._meta.label_lower
            post_save.connect(_routing_changed, sender=model, dispatch_uid=f"{label}_saved")
            post_delete.connect(_routing_changed, sender=model, dispatch_uid=f"{label}_deleted")
        m2m_changed.connect(
            _model_upstreams_changed,
            sender=ImageModel.upstreams.through,
            dispatch_uid="images_imagemodel_upstreams_changed",
        )
