"""What owners and admins do to keep a fleet in check: the emergency stop (pause an agent or the whole
workspace, optionally releasing its live holds; resume), each agent's limits and the workspace's
defaults; and the notice the owners get the first time in a day an agent meets a limit.

The request path reads these settings from each process's copies of the agent and workspace rows
(workspaces/keys.py), which follow a save within a second: every change here is a save.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from accounts.owner_mail import email_owners
from agentcal.clock import isoformat_z
from agentcal.errors import AgentCalError, InvalidRequest
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings import engine
from bookings.models import Reservation
from guardrails.models import LIMIT_WORDS, LimitNotice
from webhooks.models import EventType
from webhooks.outbox import outbox_emit
from workspaces.actor import Actor
from workspaces.limits import LIMIT_NAMES, agent_limits
from workspaces.models import Agent, Workspace

logger = logging.getLogger(__name__)

# What an owner may set (the model's check constraints say the same; this says it readably).
LIMIT_BOUNDS: Mapping[str, tuple[float, float]] = {
    "requests_per_second": (0.01, 10_000),
    "request_burst": (1, 100_000),
    "live_holds": (0, 1_000_000),
    "bookings_per_day": (0, 10_000_000),
    "searches_per_minute": (1, 100_000),
}


# --- The emergency stop ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stopped:
    """What a pause did: whether it changed anything (already paused: nothing), and the holds released."""

    changed: bool
    released: int


def agent_pause(*, actor: Actor, agent: Agent, release_holds: bool = False) -> Stopped:
    """Pause one agent: its writes are refused (423) from the next request on, in every process within a
    second. With `release_holds`, its live holds are released too (its bookings stay)."""
    with transaction.atomic(durable=True):
        current = Agent.objects.select_for_update().get(pk=agent.pk, workspace=actor.workspace)
        changed = current.paused_at is None
        if changed:
            current.paused_at = datetime.now(UTC)
            current.paused_by = _who(actor)
            current.save(update_fields=["paused_at", "paused_by"])
            _announce(actor, AuditEvent.AGENT_PAUSED, EventType.AGENT_PAUSED, [current], release_holds)
    released = _release_live_holds(actor, [current]) if release_holds else 0
    return Stopped(changed=changed, released=released)


def agent_resume(*, actor: Actor, agent: Agent) -> bool:
    """Let a paused agent write again; False when it was not paused (nothing audited)."""
    with transaction.atomic(durable=True):
        current = Agent.objects.select_for_update().get(pk=agent.pk, workspace=actor.workspace)
        if current.paused_at is None:
            return False
        current.paused_at, current.paused_by = None, ""
        current.save(update_fields=["paused_at", "paused_by"])
        _announce(actor, AuditEvent.AGENT_RESUMED, EventType.AGENT_RESUMED, [current], False)
    return True


def workspace_pause(*, actor: Actor, release_holds: bool = False) -> Stopped:
    """Pause every agent of the workspace at once (those added later too, until it is resumed)."""
    with transaction.atomic(durable=True):
        workspace = Workspace.objects.select_for_update().get(pk=actor.workspace.pk)
        changed = workspace.paused_at is None
        agents = list(Agent.objects.filter(workspace=workspace))
        if changed:
            workspace.paused_at = datetime.now(UTC)
            workspace.paused_by = _who(actor)
            workspace.save(update_fields=["paused_at", "paused_by"])
            _announce(actor, AuditEvent.WORKSPACE_PAUSED, EventType.WORKSPACE_PAUSED, agents, release_holds)
    released = _release_live_holds(actor, agents) if release_holds else 0
    return Stopped(changed=changed, released=released)


def workspace_resume(*, actor: Actor) -> bool:
    """Lift the workspace's pause (agents paused one by one stay paused)."""
    with transaction.atomic(durable=True):
        workspace = Workspace.objects.select_for_update().get(pk=actor.workspace.pk)
        if workspace.paused_at is None:
            return False
        workspace.paused_at, workspace.paused_by = None, ""
        workspace.save(update_fields=["paused_at", "paused_by"])
        agents = list(Agent.objects.filter(workspace=workspace))
        _announce(actor, AuditEvent.WORKSPACE_RESUMED, EventType.WORKSPACE_RESUMED, agents, False)
    return True


def _who(actor: Actor) -> str:
    return actor.user_email or (actor.agent.public_id if actor.agent else "") or "operator"


def _announce(
    actor: Actor, audited: AuditEvent, event: EventType, agents: list[Agent], release_holds: bool
) -> None:
    """One audit row for the change; one event per agent concerned (each agent's endpoints get theirs)."""
    details: dict[str, Any] = {"agents": [a.public_id for a in agents]}
    if audited in (AuditEvent.AGENT_PAUSED, AuditEvent.WORKSPACE_PAUSED):
        details["release_holds"] = release_holds
    audit_record(event_type=audited, outcome=Outcome.SUCCESS, actor=actor, details=details)
    scope = "workspace" if event in (EventType.WORKSPACE_PAUSED, EventType.WORKSPACE_RESUMED) else "agent"
    for agent in agents:
        outbox_emit(
            event_type=event,
            workspace_id=actor.workspace.pk,
            agent_id=agent.pk,
            data={
                "agent_id": agent.public_id,
                "scope": scope,
                "by": _who(actor),
                "at": isoformat_z(datetime.now(UTC)),
                "release_holds": release_holds,
            },
        )


def _release_live_holds(actor: Actor, agents: list[Agent]) -> int:
    """Release the agents' live holds as the person who paused them, each in its own transaction (a
    hold committed or released meanwhile is simply skipped)."""
    hold_ids = (
        Reservation.objects.filter(agent__in=agents, is_primary=True)
        .live_holds()
        .values_list("hold_id", flat=True)
        .distinct()
    )
    released = 0
    for hold_id in list(hold_ids):
        try:
            engine.hold_release_by_person(actor=actor, hold_id=hold_id)
        except AgentCalError as exc:  # committed, released or expired since the read
            logger.info("pause: hold %s not released: %s", hold_id, exc.code)
            continue
        released += 1
    return released


# --- Limits ----------------------------------------------------------------------------------------------


def _clean_limits(values: Mapping[str, Any]) -> dict[str, Any]:
    """The limits given, checked: a number within bounds, or None (inherit). Unknown names are refused."""
    unknown = sorted(set(values) - set(LIMIT_NAMES))
    if unknown:
        raise InvalidRequest(
            f"Unknown limit(s): {', '.join(unknown)}.", errors={n: ["Unknown."] for n in unknown}
        )
    cleaned: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for name, value in values.items():
        if value is None or value == "":
            cleaned[name] = None
            continue
        low, high = LIMIT_BOUNDS[name]
        try:
            number = float(value) if name == "requests_per_second" else int(value)
        except (TypeError, ValueError):
            errors[name] = ["Enter a number, or leave it empty to inherit."]
            continue
        if not low <= number <= high:
            errors[name] = [f"Between {low:g} and {high:g}."]
            continue
        cleaned[name] = number
    if errors:
        raise InvalidRequest("Some limits are not valid; see `errors`.", errors=errors)
    return cleaned


def _set_limits(row: Agent | Workspace, cleaned: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Save the (cleaned) limits that differ on the locked row; returns them as {name: [before, after]}."""
    changes = {
        name: [getattr(row, f"limit_{name}"), value]
        for name, value in cleaned.items()
        if getattr(row, f"limit_{name}") != value
    }
    for name, (_, value) in changes.items():
        setattr(row, f"limit_{name}", value)
    if changes:
        row.save(update_fields=[f"limit_{name}" for name in changes])
    return changes


def agent_limits_update(*, actor: Actor, agent: Agent, limits: Mapping[str, Any]) -> Agent:
    """Set the agent's own limits (None: inherit the workspace's default); audited with before/after."""
    cleaned = _clean_limits(limits)  # refused before any lock is taken
    with transaction.atomic(durable=True):
        current = Agent.objects.select_for_update().get(pk=agent.pk, workspace=actor.workspace)
        if changes := _set_limits(current, cleaned):
            audit_record(
                event_type=AuditEvent.AGENT_LIMITS_UPDATED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                details={"agent_id": current.public_id, "changes": changes},
            )
    return current


def workspace_limits_update(*, actor: Actor, limits: Mapping[str, Any]) -> Workspace:
    """Set the workspace's defaults for its agents (None: the installation's); audited."""
    cleaned = _clean_limits(limits)
    with transaction.atomic(durable=True):
        workspace = Workspace.objects.select_for_update().get(pk=actor.workspace.pk)
        if changes := _set_limits(workspace, cleaned):
            audit_record(
                event_type=AuditEvent.WORKSPACE_LIMITS_UPDATED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                details={"changes": changes},
            )
    return workspace


# --- Owners told -----------------------------------------------------------------------------------------


def limit_reached(*, agent_pk: int, limit: str) -> LimitNotice | None:
    """The first time today the agent met `limit`: a dashboard notice and one email to the owners. None
    when today's notice exists already (another process saw the same first refusal)."""
    agent = Agent.objects.select_related("workspace").filter(pk=agent_pk).first()
    if agent is None:
        return None
    try:
        with transaction.atomic():
            notice = LimitNotice.objects.create(
                workspace=agent.workspace, agent=agent, limit=limit, day=datetime.now(UTC).date()
            )
    except IntegrityError:
        return None
    limits = agent_limits(agent, agent.workspace)
    what = LIMIT_WORDS.get(limit, limit)
    value = {
        "requests": f"{limits.requests_per_second:g} a second, bursts of {limits.request_burst}",
        "searches": f"{limits.searches_per_minute} a minute",
        "in_flight": f"{settings.AGENT_MAX_IN_FLIGHT_PER_PROCESS} per server process",
        "live_holds": f"{limits.live_holds}",
        "bookings_per_day": f"{limits.bookings_per_day}",
    }.get(limit, "")
    email_owners(
        agent.workspace,
        f"[AgentCal] {agent.name} reached {what}",
        f"{agent.name} (workspace {agent.workspace.name}) reached {what} ({value}) today; the requests "
        "over it were refused with 429 and the agent was told when to retry.\n\n"
        "If that was expected, raise the agent's limits on its page in the dashboard. If the agent is "
        "misbehaving, pause it there: its writes stop at once.\n\n"
        f"{settings.DASHBOARD_BASE_URL}/w/{agent.workspace.slug}/agents/{agent.public_id}\n\n"
        "You get this once a day per agent and limit.",
        about=f"limit notice {agent.public_id}/{limit}",
    )
    return notice


def notices_dismiss(*, actor: Actor, agent: Agent | None = None) -> int:
    """Clear the workspace's open notices (or one agent's) from the dashboard; they stay on record."""
    notices = LimitNotice.objects.filter(workspace=actor.workspace, dismissed_at__isnull=True)
    if agent is not None:
        notices = notices.filter(agent=agent)
    return notices.update(dismissed_at=datetime.now(UTC))
