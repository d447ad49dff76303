"""An agent's budgets that must be exact: live holds at once and bookings per UTC day, checked and
counted in the write's own transaction on the agent's usage row, once the write holds its calendars'
locks (the one-statement path's CTE, or a statement of the general path's transaction). Never
exceeded; near a budget, under contention, a write that would just have fit may be refused.

Why that is exact and cannot deadlock: docs/architecture.md, "Guardrails".
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from agentcal.db import bound_cursor
from agentcal.errors import QuotaExceeded
from bookings.models import Reservation, ReservationStatus
from workspaces.actor import Actor
from workspaces.limits import agent_limits
from workspaces.models import AgentUsage

_TODAY = "(now() AT TIME ZONE 'UTC')::date"
_LIVE_HOLDS = f"""(SELECT count(*) FROM bookings_reservation r
                   WHERE r.agent_id = %(budget_agent)s AND r.is_primary
                     AND r.status = '{ReservationStatus.HELD}' AND r.expires_at > now())"""
_MADE_IN_SNAPSHOT = "(SELECT s.holds_made FROM workspaces_agentusage s WHERE s.agent_id = %(budget_agent)s)"


def budget_sql(*, also: str = "true") -> str:
    """The UPDATE, for a CTE or a statement of its own: a row when the write fits the budgets (and is
    counted), none when it does not or when `also` (SQL) is false. `%(budget_live_holds)s` /
    `%(budget_bookings_per_day)s` NULL: that budget is counted, not checked."""
    return f"""
UPDATE workspaces_agentusage u
   SET holds_made = u.holds_made + %(budget_holds)s,
       day = {_TODAY},
       bookings_on_day = CASE WHEN u.day = {_TODAY} THEN u.bookings_on_day ELSE 0 END + %(budget_bookings)s
 WHERE u.agent_id = %(budget_agent)s
   AND (%(budget_holds)s = 0 OR %(budget_live_holds)s::integer IS NULL
        OR {_LIVE_HOLDS}
           + (u.holds_made - {_MADE_IN_SNAPSHOT})
           + %(budget_holds)s <= %(budget_live_holds)s::integer)
   AND (%(budget_bookings)s = 0 OR %(budget_bookings_per_day)s::integer IS NULL
        OR CASE WHEN u.day = {_TODAY} THEN u.bookings_on_day ELSE 0 END + %(budget_bookings)s
           <= %(budget_bookings_per_day)s::integer)
   AND {also}
RETURNING 1
"""


BUDGET_SQL = budget_sql()


def budget_params(actor: Actor, *, holds: int, bookings: int, enforced: bool = True) -> dict[str, Any]:
    """The parameters of BUDGET_SQL for a write making `holds` holds and `bookings` bookings."""
    assert actor.agent is not None
    limits = agent_limits(actor.agent, actor.workspace)
    return {
        "budget_agent": actor.agent.pk,
        "budget_holds": holds,
        "budget_bookings": bookings,
        "budget_live_holds": limits.live_holds if enforced else None,
        "budget_bookings_per_day": limits.bookings_per_day if enforced else None,
    }


def spend_budget(actor: Actor, *, holds: int, bookings: int, enforced: bool = True) -> None:
    """The general path's first statement: count the write against the agent's budgets, or refuse it."""
    with bound_cursor() as cursor:
        cursor.execute(BUDGET_SQL, budget_params(actor, holds=holds, bookings=bookings, enforced=enforced))
        fits = cursor.fetchone() is not None
    if not fits:
        raise over_budget(actor, holds=holds)


def over_budget(actor: Actor, *, holds: int) -> QuotaExceeded:
    """The refusal of a write over a budget: which one, and when it has room again (a read of what is
    used, made only when refusing)."""
    assert actor.agent is not None
    agent = actor.agent
    limits = agent_limits(agent, actor.workspace)
    now = datetime.now(UTC)
    if holds:
        live = Reservation.objects.filter(agent=agent, is_primary=True).live_holds()
        first = live.order_by("expires_at").values_list("expires_at", flat=True).first()
        # A hold released by a concurrent write may still have been counted: then one second is enough.
        wait = math.ceil((first - now).total_seconds()) if first is not None else 1
        error = QuotaExceeded(
            f"This agent has {limits.live_holds} live holds, its limit: commit or release one (or let one "
            "expire) first.",
            quota="live_holds",
            limit=limits.live_holds,
            window_seconds=0,
            retry_after_seconds=max(1, wait) if limits.live_holds else None,
        )
        error.agent_limit = "live_holds"
        return error
    usage = AgentUsage.objects.filter(agent=agent).first()
    made = usage.bookings_on(now.date()) if usage is not None else 0
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    error = QuotaExceeded(
        f"This agent made {made} bookings today (UTC), its limit is {limits.bookings_per_day}.",
        quota="bookings_per_day",
        limit=limits.bookings_per_day,
        window_seconds=86400,
        retry_after_seconds=math.ceil((midnight - now).total_seconds()) if limits.bookings_per_day else None,
    )
    error.agent_limit = "bookings_per_day"
    return error
