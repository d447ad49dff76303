"""Reads behind the dashboard's guardrail views: each limit in force and where it comes from, what an
agent uses of its budgets now, and the notices the owners have not dismissed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db.models import QuerySet

from bookings.models import Reservation
from guardrails.models import LimitNotice
from workspaces.limits import LIMIT_NAMES, agent_limits, workspace_limits
from workspaces.models import Agent, AgentUsage, Workspace

# Notices older than this are history (the audit trail keeps the refusals).
NOTICE_DAYS = 7


class Origin(StrEnum):
    """Who set the limit in force: the agent's own, its workspace's default, or the installation's."""

    AGENT = "agent"
    WORKSPACE = "workspace"
    INSTALLATION = "installation"


@dataclass(frozen=True)
class Setting:
    """One limit at one level: what binds, what this level sets itself (None: it inherits), and what it
    would inherit (the level above's value)."""

    name: str
    value: float
    own: float | None
    inherited: float
    origin: Origin


def agent_limit_settings(agent: Agent, workspace: Workspace) -> list[Setting]:
    """The agent's limits in force (workspaces.limits.agent_limits), each with where it comes from."""
    binding, above = agent_limits(agent, workspace), workspace_limits(workspace)
    rows = []
    for name in LIMIT_NAMES:
        own = getattr(agent, f"limit_{name}")
        if own is not None:
            origin = Origin.AGENT
        elif getattr(workspace, f"limit_{name}") is not None:
            origin = Origin.WORKSPACE
        else:
            origin = Origin.INSTALLATION
        rows.append(Setting(name, getattr(binding, name), own, getattr(above, name), origin))
    return rows


def workspace_limit_settings(workspace: Workspace) -> list[Setting]:
    """The workspace's defaults for its agents (workspaces.limits.workspace_limits), each with its origin."""
    binding = workspace_limits(workspace)
    rows = []
    for name in LIMIT_NAMES:
        own = getattr(workspace, f"limit_{name}")
        origin = Origin.INSTALLATION if own is None else Origin.WORKSPACE
        rows.append(Setting(name, getattr(binding, name), own, settings.AGENT_LIMIT_DEFAULTS[name], origin))
    return rows


@dataclass(frozen=True)
class Usage:
    live_holds: int
    bookings_today: int


def agent_usage(agent: Agent) -> Usage:
    usage = AgentUsage.objects.filter(agent=agent).first()
    bookings = usage.bookings_on(datetime.now(UTC).date()) if usage is not None else 0
    return Usage(live_holds=_live_holds(agent=agent), bookings_today=bookings)


def workspace_releasable_holds(workspace: Workspace) -> int:
    """The live holds of all the workspace's agents that pausing them all with their holds releases."""
    return _live_holds(agent__workspace=workspace, awaiting_approval__isnull=True)


def agent_releasable_holds(agent: Agent) -> int:
    """The agent's live holds that pausing it with its holds releases. Neither counts a hold awaiting an
    approval: the approval decides it, and releasing it is refused (engine.hold_release_by_person)."""
    return _live_holds(agent=agent, awaiting_approval__isnull=True)


def _live_holds(**whose: object) -> int:
    """Holds not yet committed, released or lapsed, counted once however many calendars each spans."""
    return (
        Reservation.objects.filter(is_primary=True, **whose).live_holds().values("hold_id").distinct().count()
    )


def open_notices(workspace: Workspace, *, agent: Agent | None = None) -> QuerySet[LimitNotice]:
    since = datetime.now(UTC).date() - timedelta(days=NOTICE_DAYS)
    notices = LimitNotice.objects.filter(workspace=workspace, dismissed_at__isnull=True, day__gte=since)
    if agent is not None:
        notices = notices.filter(agent=agent)
    return notices.select_related("agent").order_by("-created_at")
