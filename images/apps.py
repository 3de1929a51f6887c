from django.apps import AppConfig


class ImagesConfig(AppConfig):
    name = "images"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api.catalog import model_source_register
        from core.config_registry import Invalidating, invalidating_register
        from images.selectors import image_models_catalog

        model_source_register(image_models_catalog)
        # Prices, capabilities and routing; a new model is listed.
        invalidating_register(
            Invalidating("images.ImageModel", new_rows=True), Invalidating("images.ImageModel_upstreams")
        )
