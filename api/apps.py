from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "API"

    def ready(self) -> None:
        from api.catalog import key_models_check
        from keys.services import api_key_models_check_register

        # The domain's surfaces (createapikey, the admin) check a key's models through keys.services.
        api_key_models_check_register(key_models_check)
