from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "agentcal.api"
    label = "api"
    verbose_name = "Agent API plumbing (idempotency)"
