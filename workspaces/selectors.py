"""What people's pages read of agents and their keys."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Count, Q

from agentcal.ids import is_public_id
from workspaces.models import Agent, ApiKey, Workspace


def agent_names(workspace: Workspace, public_ids: Iterable[str]) -> dict[str, str]:
    """The names of the workspace's agents among `public_ids`, by public id (ids of none are left out)."""
    return dict(
        Agent.objects.filter(workspace=workspace, public_id__in=set(public_ids)).values_list(
            "public_id", "name"
        )
    )


def agent_in_workspace(workspace: Workspace, public_id: str) -> Agent | None:
    # A form's value may be anything: one that is no public id (a NUL character, which PostgreSQL
    # refuses in a comparison) finds nothing rather than failing.
    if not is_public_id(public_id):
        return None
    return Agent.objects.filter(workspace=workspace, public_id=public_id).first()


def agents_with_key_counts(workspace: Workspace, *, now: datetime) -> list[Agent]:
    """The workspace's agents, active first then by name, each with `active_keys` (neither revoked nor
    expired at `now`) and `all_keys`."""
    active_key = Q(api_keys__revoked_at__isnull=True) & (
        Q(api_keys__expires_at__isnull=True) | Q(api_keys__expires_at__gt=now)
    )
    return list(
        Agent.objects.filter(workspace=workspace)
        .annotate(active_keys=Count("api_keys", filter=active_key), all_keys=Count("api_keys"))
        .order_by("-is_active", "name", "id")
    )


def agent_keys(agent: Agent) -> list[ApiKey]:
    """Newest first."""
    return list(agent.api_keys.order_by("-created_at", "-id"))


def agent_key(agent: Agent, *, prefix: str) -> ApiKey | None:
    return ApiKey.objects.select_related("agent").filter(agent=agent, prefix=prefix).first()


def agent_key_by_pk(agent: Agent, pk: int) -> ApiKey | None:
    return ApiKey.objects.filter(pk=pk, agent=agent).first()


def active_agents(workspace: Workspace) -> list[Agent]:
    """Newest first."""
    return list(Agent.objects.filter(workspace=workspace, is_active=True).order_by("-created_at", "-id"))


def active_agent(workspace: Workspace, public_id: str) -> Agent | None:
    agent = agent_in_workspace(workspace, public_id)
    return agent if agent is not None and agent.is_active else None


def has_agents(workspace: Workspace) -> bool:
    return Agent.objects.filter(workspace=workspace).exists()


def has_live_key(workspace: Workspace, *, now: datetime) -> bool:
    """Whether an active agent of the workspace has a key neither revoked nor expired at `now`."""
    live_key = Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    return ApiKey.objects.filter(live_key, agent__workspace=workspace, agent__is_active=True).exists()


def workspace_agents(workspace: Workspace) -> list[Agent]:
    """Active first, then by name."""
    return list(Agent.objects.filter(workspace=workspace).order_by("-is_active", "name", "id"))


def agent_names_by_name(workspace: Workspace) -> dict[str, str]:
    """Every agent's name by public id, in order of name."""
    return {a.public_id: a.name for a in Agent.objects.filter(workspace=workspace).order_by("name")}


def first_active_agent(workspace: Workspace) -> Agent | None:
    """The first active agent by name."""
    return Agent.objects.filter(workspace=workspace, is_active=True).order_by("name", "id").first()
