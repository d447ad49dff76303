"""Reads behind the dashboard's guardrail views: what an agent uses of its budgets now, and the notices
the owners have not dismissed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import QuerySet

from bookings.models import Reservation, ReservationStatus
from guardrails.models import LimitNotice
from workspaces.models import Agent, AgentUsage, Workspace

# Notices older than this are history (the audit trail keeps the refusals).
NOTICE_DAYS = 7


@dataclass(frozen=True)
class Usage:
    live_holds: int
    bookings_today: int


def agent_usage(agent: Agent) -> Usage:
    now = datetime.now(UTC)
    live = (
        Reservation.objects.filter(
            agent=agent, status=ReservationStatus.HELD, is_primary=True, expires_at__gt=now
        )
        .values("hold_id")
        .distinct()
        .count()
    )
    usage = AgentUsage.objects.filter(agent=agent).first()
    today = usage.bookings_on_day if usage is not None and usage.day == now.date() else 0
    return Usage(live_holds=live, bookings_today=today)


def open_notices(workspace: Workspace, *, agent: Agent | None = None) -> QuerySet[LimitNotice]:
    since = datetime.now(UTC).date() - timedelta(days=NOTICE_DAYS)
    notices = LimitNotice.objects.filter(workspace=workspace, dismissed_at__isnull=True, day__gte=since)
    if agent is not None:
        notices = notices.filter(agent=agent)
    return notices.select_related("agent").order_by("-created_at")
