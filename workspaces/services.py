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


DEFAULT_PRIORITY = 100


@transaction.atomic
def agent_key_bootstrap(
    *, workspace_slug: str, agent_name: str, scopes: list[str], priority: int | None, max_priority: int | None
) -> tuple[Agent, ApiKey, str]:
    """Create the workspace and agent when missing, and a new key for the agent.

    Priorities given are applied (to an existing agent too); priorities not given leave an existing
    agent as it is, so minting a second key never quietly demotes an agent.
    """
    workspace, _ = Workspace.objects.get_or_create(slug=workspace_slug, defaults={"name": workspace_slug})
    agent_slug = slugify(agent_name) or "agent"
    agent = Agent.objects.filter(workspace=workspace, slug=agent_slug).first()
    if agent is None:
        base = DEFAULT_PRIORITY if priority is None else priority
        agent = Agent.objects.create(
            workspace=workspace,
            slug=agent_slug,
            name=agent_name,
            priority=base,
            max_priority=max(base, max_priority if max_priority is not None else base),
        )
    elif priority is not None or max_priority is not None:
        agent.priority = agent.priority if priority is None else priority
        ceiling = agent.max_priority if max_priority is None else max_priority
        agent.max_priority = max(agent.priority, ceiling)
        agent.save(update_fields=["priority", "max_priority"])
    key, raw = api_key_create(agent=agent, scopes=scopes)
    return agent, key, raw
