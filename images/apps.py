from django.apps import AppConfig
from django.db.models.signals import m2m_changed, post_delete, post_save

from core.config_cache import config_generation_bump_on_commit


def _image_models_changed(**_: object) -> None:
    # Cached model resolutions (images/selectors.py) and upstream lists (upstreams/routing.py) hold
    # these rows: every process must read them again once this write is committed.
    config_generation_bump_on_commit()


def _model_upstreams_changed(*, action: str, **_: object) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        _image_models_changed()


class ImagesConfig(AppConfig):
    name = "images"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api.catalog import model_source_register
        from images.models import ImageModel
        from images.selectors import image_models_catalog

        model_source_register(image_models_catalog)
        # Not HostedImage: it is written by calls, and no cached answer depends on it.
        post_save.connect(_image_models_changed, sender=ImageModel, dispatch_uid="images_imagemodel_saved")
        post_delete.connect(
            _image_models_changed, sender=ImageModel, dispatch_uid="images_imagemodel_deleted"
        )
        m2m_changed.connect(
            _model_upstreams_changed,
            sender=ImageModel.upstreams.through,
            dispatch_uid="images_imagemodel_upstreams_changed",
        )
