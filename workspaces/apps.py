from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = "Workspaces, agents and API keys"

    def ready(self) -> None:
        from workspaces import schema  # noqa: F401  (registers the OpenAPI auth extension)
