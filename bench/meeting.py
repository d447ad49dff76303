"""The meeting scenario: N agents at once, each after the earliest 30-minute meeting of the same three
people (Berlin, New York, Kolkata) over their next two working weeks, ~30 % of which is already busy.

Each strategy (bench.meeting_agents) gets its own copy of the same fortnight (bench.meeting_week). What
the agents saw is checked against the rows afterwards: no two live reservations overlap, none sits on
upstream busy time, and every hold covers all three people inside each one's working hours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from bench.meeting_agents import STRATEGIES, MeetingRun, run_agents
from bench.meeting_week import MeetingWeeks, build, common_free_meetings, first_monday_after, plant
from bench.progress import Progress
from bench.stats import ScenarioResult, latency_summary, ratio
from bench.targets import LocalTarget
from bookings.models import Calendar, Reservation, ReservationStatus
from bookings.rules import open_spans
from bookings.spans import Span

MEETING_SCENARIO = "meeting"

_LIVE_ON_BUSY_BLOCKS_SQL = """
    SELECT count(DISTINCT r.id)
      FROM bookings_reservation r
      JOIN bookings_busyblock b
        ON b.calendar_id = r.calendar_id AND b.start_time < r.end_time AND r.start_time < b.end_time
     WHERE r.calendar_id = ANY(%s) AND r.status IN ('held', 'committed')
"""


def meeting_results(
    *,
    target: LocalTarget,
    base_url: str,
    agents: int,
    tries: int,
    seed: int,
    progress: Progress,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
    strategies: Sequence[str] = STRATEGIES,
) -> list[ScenarioResult]:
    weeks = build(monday=first_monday_after(datetime.now(UTC)), seed=seed)
    capacity = common_free_meetings(weeks)
    results = []
    for strategy in strategies:
        calendars = plant(weeks, actor=target.actor, label=strategy)
        with progress.phase(f"meeting · {strategy} · http", total=agents, unit="agents") as bar:
            run = run_agents(
                strategy,
                agents=agents,
                base_url=base_url,
                key_for=target.key,
                calendars=calendars,
                window=weeks.window,
                tries=tries,
                timeout=timeout,
                headers=headers,
            )
            bar.advance(agents)
        result = _result(strategy, run, weeks, capacity)
        result.double_bookings = target.double_bookings(calendars, weeks.window)
        result.extra.update(check_rows(calendars))
        results.append(result)
    return results


def _result(strategy: str, run: MeetingRun, weeks: MeetingWeeks, capacity: int) -> ScenarioResult:
    outcomes = [o for agent in run.agents for o in agent.outcomes]
    held = [agent.held_after for agent in run.agents if agent.held_after is not None]
    result = ScenarioResult(
        MEETING_SCENARIO,
        strategy,
        "http",
        outcomes,
        run.wall_seconds,
        double_bookings=None,
        completed_bookings=len(held),
    )
    # Every 409 an agent had to read and act on; "nothing left" is an answer, not a conflict.
    conflicts = sum(1 for o in outcomes if o.status == 409 and o.code != "no_slot_found")
    failures: dict[str, int] = {}
    for agent in run.agents:
        if agent.failed:
            failures[agent.failed] = failures.get(agent.failed, 0) + 1
    result.extra = {
        "agents": len(run.agents),
        "meetings_held": len(held),
        "meetings_per_second": result.bookings_per_second,
        "agent_visible_conflicts": conflicts,
        "conflicts_per_meeting": ratio(conflicts, len(held)),
        "requests_per_meeting": ratio(len(outcomes), len(held)),
        "time_to_hold_ms": latency_summary(held),
        "hold_tries_max": max((agent.tries for agent in run.agents), default=0),
        "gave_up": sum(1 for agent in run.agents if agent.gave_up),
        "no_slot_left": sum(1 for agent in run.agents if agent.no_slot),
        "failures": failures,
        "common_free_meetings_at_start": capacity,
        "busy_share": {week.person.name: round(week.busy_share, 3) for week in weeks.people},
        "window": {"start": weeks.window.start.isoformat(), "end": weeks.window.end.isoformat()},
    }
    return result


def check_rows(calendars: Sequence[str]) -> dict[str, Any]:
    """From the database: holds made, holds not covering all three people, holds outside any one's
    working hours (in that calendar's zone, as its rules say), live reservations on upstream busy time."""
    by_id = {c.public_id: c for c in Calendar.objects.filter(public_id__in=list(calendars))}
    inside: dict[str, Callable[[Span], bool]] = {
        pid: _working_hours_test(calendar) for pid, calendar in by_id.items()
    }
    groups: dict[str, list[tuple[str, Span]]] = {}
    rows = Reservation.objects.filter(
        calendar__public_id__in=list(calendars), status=ReservationStatus.HELD
    ).values_list("hold_id", "calendar__public_id", "start_time", "end_time")
    for hold_id, calendar, start, end in rows:
        groups.setdefault(hold_id, []).append((calendar, Span(start, end)))
    with connection.cursor() as cursor:
        cursor.execute(_LIVE_ON_BUSY_BLOCKS_SQL, [[c.pk for c in by_id.values()]])
        on_busy = int(cursor.fetchone()[0])
    return {
        "holds_in_database": len(groups),
        "holds_not_on_all_three": sum(1 for g in groups.values() if {c for c, _ in g} != set(calendars)),
        "holds_outside_working_hours": sum(
            1 for g in groups.values() if not all(inside[c](span) for c, span in g)
        ),
        "live_reservations_on_busy_time": on_busy,
    }


def _working_hours_test(calendar: Calendar) -> Callable[[Span], bool]:
    rules = calendar.rules
    if rules is None:
        return lambda span: True
    return lambda span: open_spans(rules, calendar.timezone, span) == [span]
