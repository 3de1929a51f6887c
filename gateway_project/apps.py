from django.apps import AppConfig


class GatewayProjectConfig(AppConfig):
    name = "gateway_project"
    verbose_name = "Gateway"

    def ready(self) -> None:
        # Connects the per-request memo of the configuration generation to request_started/finished.
        from gateway_project import generations  # noqa: F401
