"""Agents' addresses: `<agent slug>@<workspace inbound domain>`, matched case-insensitively.

A workspace's inbound domain is a domain of its own, once proven by DNS (inboxes.mail_settings), or, by
default, `<workspace slug>.<INBOUND_DOMAIN_SUFFIX>`. A domain still waiting for its proof
(`inbound_domain_pending`) is never looked at here: it receives no mail, names no address and signs
nothing, so claiming someone else's domain gains nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from workspaces.models import Agent, Workspace


def workspace_domain(workspace: Workspace) -> str:
    # `inbound_domain` is set only by a verification (constraint workspace_inbound_domain_verified).
    return (workspace.inbound_domain or f"{workspace.slug}.{settings.INBOUND_DOMAIN_SUFFIX}").lower()


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
    if not at or not local or not domain:
        return Recipient(agent=None, workspace=None, foreign=True)
    # Only a proven domain: a pending one is someone's claim, and mail to it is for whoever owns it.
    workspace = Workspace.objects.filter(inbound_domain=domain).first()
    if workspace is None:
        workspace_slug = domain.removesuffix("." + settings.INBOUND_DOMAIN_SUFFIX)
        if workspace_slug == domain or not workspace_slug or "." in workspace_slug:
            return Recipient(agent=None, workspace=None, foreign=True)
        workspace = Workspace.objects.filter(slug__iexact=workspace_slug).first()
        if workspace is None:
            return Recipient(agent=None, workspace=None)
    agent = (
        Agent.objects.filter(workspace=workspace, slug=local.lower(), is_active=True)
        .select_related("workspace")
        .first()
    )
    return Recipient(agent=agent, workspace=workspace)
