from django.apps import AppConfig


class ChatConfig(AppConfig):
    """The text endpoint families: chat completions and responses (OpenAI style), messages and token
    counting (Anthropic style)."""

    name = "chat"
    verbose_name = "Text models"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api.catalog import model_source_register
        from chat.selectors import text_models_catalog
        from core.config_registry import Invalidating, invalidating_register

        model_source_register(text_models_catalog)
        # Prices, capabilities and routing; a new model is listed.
        invalidating_register(
            Invalidating("chat.TextModel", new_rows=True), Invalidating("chat.TextModel_upstreams")
        )
