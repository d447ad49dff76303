"""Roles in a workspace and what each may do: the one table every page, service and explainer reads.

Four roles, each a superset of the next: a viewer reads, an approver also decides agents' requests, an
admin also runs the agents (keys, webhooks, inbox settings, limits, calendar links, mail setup) and reads
their mail, and an owner also manages the team and holds the emergency stop. Only owners manage the team,
admins included: a role decides who holds the agents' keys and reads their mail, so handing one out is
the owner's call; so is stopping every agent's writes at once. Owners alone are emailed when an approval
waits (accounts.owner_mail).
"""

from __future__ import annotations

from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    APPROVER = "approver", "Approver"
    VIEWER = "viewer", "Viewer"


class Permission(models.TextChoices):
    """What a member may do in their workspace; labels are what the team page's explainer says."""

    READ = "read", "See approvals, calendars, the audit trail, metrics, agents and mail setup"
    DECIDE_APPROVALS = "decide_approvals", "Approve or deny agents' requests"
    READ_INBOXES = "read_inboxes", "Read agents' inboxes"
    MANAGE_WORKSPACE = (
        "manage_workspace",
        "Manage agents, API keys, limits, webhooks, inbox settings, calendar connections and mail setup",
    )
    PAUSE_AGENTS = "pause_agents", "Pause and resume agents, one or all (the emergency stop)"
    MANAGE_TEAM = "manage_team", "Invite people, change roles, remove members"


_VIEWER = frozenset({Permission.READ})
_APPROVER = _VIEWER | {Permission.DECIDE_APPROVALS}
_ADMIN = _APPROVER | {Permission.READ_INBOXES, Permission.MANAGE_WORKSPACE}
_OWNER = _ADMIN | {Permission.PAUSE_AGENTS, Permission.MANAGE_TEAM}

GRANTS: dict[str, frozenset[Permission]] = {
    Role.OWNER: _OWNER,
    Role.ADMIN: _ADMIN,
    Role.APPROVER: _APPROVER,
    Role.VIEWER: _VIEWER,
}

ROLE_SUMMARIES: dict[str, str] = {
    Role.OWNER: "Everything, including the team and pausing agents. Emailed when an approval waits.",
    Role.ADMIN: "Runs the agents and reads their mail; cannot change the team or pause agents.",
    Role.APPROVER: "Decides agents' requests and reads everything else.",
    Role.VIEWER: "Reads: approvals, calendars, audit trail, metrics, agents.",
}


def role_may(role: str, permission: Permission) -> bool:
    """Whether `role` grants `permission`; an unknown role grants nothing."""
    return permission in GRANTS.get(role, frozenset())


def roles_that_may(permission: Permission) -> list[str]:
    return [role for role in Role.values if role_may(role, permission)]
