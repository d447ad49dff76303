from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = "Workspaces, agents and API keys"

    def ready(self) -> None:
        from agentcal.local_cache import watch
        from workspaces import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from workspaces.models import Agent, ApiKey, Workspace

        # Every process keeps copies of key rows with their agent and workspace (workspaces/keys.py).
        watch(ApiKey, Agent, Workspace)
