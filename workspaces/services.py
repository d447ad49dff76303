from __future__ import annotations

from django.db import transaction
from django.utils.text import slugify

from workspaces.keys import api_key_create
from workspaces.models import Agent, ApiKey, Scope, Workspace


class InvalidScopes(ValueError):
    pass


def parse_scopes(raw: str) -> list[str]:
    scopes = [s.strip() for s in raw.split(",") if s.strip()]
    unknown = sorted(set(scopes) - set(Scope.values))
    if unknown:
        raise InvalidScopes(f"unknown scope(s): {', '.join(unknown)}; known: {', '.join(Scope.values)}")
    return scopes


@transaction.atomic
def agent_key_bootstrap(
    *, workspace_slug: str, agent_name: str, scopes: list[str], priority: int, max_priority: int | None
) -> tuple[Agent, ApiKey, str]:
    """Create the workspace and agent when missing (updating the agent's priorities), and a new key."""
    workspace, _ = Workspace.objects.get_or_create(slug=workspace_slug, defaults={"name": workspace_slug})
    agent_slug = slugify(agent_name) or "agent"
    agent, created = Agent.objects.get_or_create(
        workspace=workspace,
        slug=agent_slug,
        defaults={
            "name": agent_name,
            "priority": priority,
            "max_priority": max(priority, max_priority or priority),
        },
    )
    if not created:
        agent.priority = priority
        agent.max_priority = max(priority, max_priority if max_priority is not None else agent.max_priority)
        agent.save(update_fields=["priority", "max_priority"])
    key, raw = api_key_create(agent=agent, scopes=scopes)
    return agent, key, raw
