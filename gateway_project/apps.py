from django.apps import AppConfig


class GatewayProjectConfig(AppConfig):
    name = "gateway_project"
    verbose_name = "Gateway"
