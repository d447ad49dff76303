from django.apps import AppConfig


class GuardrailsConfig(AppConfig):
    name = "guardrails"
    verbose_name = "Guardrails: agents' limits, the emergency stop, owners told when a limit is met"
