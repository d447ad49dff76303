"""Agents' addresses: `<agent slug>@<workspace slug>.<INBOUND_DOMAIN_SUFFIX>`, matched case-insensitively."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from workspaces.models import Agent, Workspace


def workspace_domain(workspace: Workspace) -> str:
    return f"{workspace.slug}.{settings.INBOUND_DOMAIN_SUFFIX}".lower()


def agent_address(agent: Agent) -> str:
    return f"{agent.slug}@{workspace_domain(agent.workspace)}".lower()


@dataclass(frozen=True)
class Recipient:
    """What an envelope recipient resolves to: an agent, or why not (`foreign`: not a domain of ours)."""

    agent: Agent | None
    workspace: Workspace | None
    foreign: bool = False


def resolve_recipient(address: str) -> Recipient:
    local, at, domain = address.strip().strip("<>").rpartition("@")
    domain = domain.lower().rstrip(".")
    suffix = "." + settings.INBOUND_DOMAIN_SUFFIX
    workspace_slug = domain.removesuffix(suffix)
    if not at or not local or workspace_slug == domain or not workspace_slug or "." in workspace_slug:
        return Recipient(agent=None, workspace=None, foreign=True)
    workspace = Workspace.objects.filter(slug__iexact=workspace_slug).first()
    if workspace is None:
        return Recipient(agent=None, workspace=None)
    agent = (
        Agent.objects.filter(workspace=workspace, slug__iexact=local, is_active=True)
        .select_related("workspace")
        .first()
    )
    return Recipient(agent=agent, workspace=workspace)
