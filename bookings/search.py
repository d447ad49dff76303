"""Finding a time across calendars: the common free grid slots of required calendars, within each one's
rules (working hours in its own zone, date overrides, buffers, notice).

Reading is one snapshot of three statements whatever the number of calendars (`read_calendars`); the
rest is pure (`rank`): docs/architecture.md, "Finding a time across calendars". CPU O((R + B + H)
log(R + B + H) + S·(1 + k)·log(R + B + H)) for R reservations, B busy blocks, H open-hours spans (days ×
intervals per day), S grid steps inside the common gaps and k optional calendars.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models, transaction

from agentcal.db import bound_cursor
from agentcal.errors import NotFound
from agentcal.metrics import SEARCH_SECONDS
from bookings.engine.rules import check_span_length
from bookings.models import Calendar
from bookings.rules import unavailable
from bookings.spans import BusyIndex, Span, grid_slots
from bookings.sql import live, overlap_params, overlaps

EARLIEST = "earliest"
MOST_OPTIONAL = "most_optional"
# A search that cannot stop at the first free slots (ranked by optional attendees, or needing some of
# them free) weighs at most this many slots, the earliest: a month on a one-minute grid would be ~45,000
# slots times every optional calendar. Past it the answer says `truncated`.
MAX_WEIGHED_SLOTS = 5_000
ORDERS = (EARLIEST, MOST_OPTIONAL)
MAX_SEARCH_CALENDARS = 20
MAX_CANDIDATES = 50
# A calendar's attnames are its column names (it has no foreign key but workspace, whose is workspace_id).
_CALENDAR_COLUMNS = [f.attname for f in Calendar._meta.concrete_fields]
# Read by a plain cursor, JSON columns arrive as text: Django's JSONField decodes them itself, in the
# ORM's converters, which Model.from_db() does not run.
_JSON_COLUMNS = [f.attname for f in Calendar._meta.concrete_fields if isinstance(f, models.JSONField)]


@dataclass(frozen=True)
class SearchQuery:
    """What an agent asks for: `duration` inside `window`, every `required` calendar (public ids) free."""

    required: Sequence[str]
    duration: timedelta
    window: Span
    optional: Sequence[str] = ()
    min_optional: int = 0
    granularity_minutes: int | None = None
    limit: int = 10
    order: str = EARLIEST


@dataclass(frozen=True)
class Candidate:
    span: Span
    calendars: list[str]  # the required calendars' public ids
    optional_free: list[str]  # the optional calendars free for the whole span

    @property
    def start_time(self) -> datetime:
        return self.span.start

    @property
    def end_time(self) -> datetime:
        return self.span.end


@dataclass
class SearchResult:
    candidates: list[Candidate]
    versions: dict[str, int]  # every calendar read, by public id: the ETag each one had in the snapshot
    searched: Span
    truncated: bool
    reasons: dict[str, bool] = field(default_factory=dict)
    calendars: dict[str, Calendar] = field(default_factory=dict)  # as read, by public id


@dataclass
class Snapshot:
    """The calendars (by public id), what is busy on each (live reservations and upstream busy blocks,
    as (start, end) pairs) and the database's now, as one read saw them."""

    calendars: dict[str, Calendar]
    busy: dict[str, list[tuple[datetime, datetime]]]
    now: datetime


def find_common_time(*, workspace_id: int, query: SearchQuery) -> SearchResult:
    """Up to `query.limit` spans on the grid inside the window, free on every required calendar and
    within its rules; each says which optional calendars are free then. One REPEATABLE READ snapshot."""
    started = time.perf_counter()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        snapshot = read_calendars(workspace_id, [*query.required, *query.optional], query.window)
    result = rank(snapshot, query)
    SEARCH_SECONDS.labels("search").observe(time.perf_counter() - started)
    return result


def read_calendars(
    workspace_id: int, public_ids: Sequence[str], window: Span, *, now: datetime | None = None
) -> Snapshot:
    """The calendars and what is busy on them in `window`: three statements. `now`: the clock that
    decides which holds have lapsed (the lock's, under a lock); else the statement's own now()."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(_CALENDAR_COLUMNS)}, now()"
            " FROM bookings_calendar WHERE workspace_id = %s AND public_id = ANY(%s)",
            [workspace_id, list(public_ids)],
        )
        rows = cursor.fetchall()
    calendars = {c.public_id: c for c in (_calendar_from(row[:-1]) for row in rows)}
    missing = [pid for pid in public_ids if pid not in calendars]
    if missing:
        raise NotFound(f"No calendar {missing[0]} in this workspace.", missing_calendars=missing)
    decided_at: datetime = now or rows[0][-1]
    by_pk = {c.pk: c.public_id for c in calendars.values()}
    # Read wide enough to see what a buffer keeps free just outside the window.
    widest = max((c.buffer for c in calendars.values()), default=timedelta(0))
    params = overlap_params(by_pk, Span(window.start - widest, window.end + widest), now=decided_at)
    busy: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    # Hand-written on the binary cursor: timestamps decoded in C. Through the ORM, parsing a month of
    # ten people's busy time from text took most of the search's time.
    with bound_cursor() as cursor:
        for table, condition in (
            ("bookings_reservation", f" AND {live('', now='%(now)s')}"),
            ("bookings_busyblock", ""),
        ):
            cursor.execute(
                f"SELECT calendar_id, start_time, end_time FROM {table}"
                f" WHERE calendar_id = ANY(%(calendars)s) AND {overlaps('')}{condition}",
                params,
            )
            for calendar_id, start, end in cursor.fetchall():
                busy[by_pk[calendar_id]].append((start, end))
    return Snapshot(calendars, busy, decided_at)


def _calendar_from(row: Sequence[Any]) -> Calendar:
    calendar = Calendar.from_db("default", _CALENDAR_COLUMNS, row)
    for column in _JSON_COLUMNS:
        value = getattr(calendar, column)
        if isinstance(value, str):
            setattr(calendar, column, json.loads(value))
    return calendar


def blocked_time(
    calendar: Calendar, busy: Sequence[tuple[datetime, datetime]], window: Span, now: datetime
) -> list[tuple[datetime, datetime]]:
    """Everything that rules a calendar's time out in `window`: its busy time widened by its buffer,
    and what its working hours, date overrides and notice close."""
    pad = calendar.buffer
    blocked = [(start - pad, end + pad) for start, end in busy] if pad else list(busy)
    if calendar.has_rules:
        closed = unavailable(
            calendar.rules, calendar.timezone, window, now=now, min_notice_minutes=calendar.min_notice_minutes
        )
        blocked += [(s.start, s.end) for s in closed]
    return blocked


def rank(snapshot: Snapshot, query: SearchQuery) -> SearchResult:
    """The candidates in `snapshot` for `query`, best first (pure): the required calendars' blocked time
    merged into one BusyIndex (O(n log n)), the grid walked inside its gaps (O(n + S log n)), and each
    slot checked against the k optional calendars' indexes (O(k log n) each)."""
    calendars, now, window = snapshot.calendars, snapshot.now, query.window
    check_span_length(
        Span(window.start, window.start + query.duration), [calendars[p] for p in query.required]
    )
    versions = {pid: calendars[pid].version for pid in (*query.required, *query.optional)}
    if window.end <= now:
        return SearchResult(
            [], versions, window, truncated=False, reasons={"window_in_the_past": True}, calendars=calendars
        )
    searched = Span(max(window.start, now), window.end)

    def blocked(pid: str) -> list[tuple[datetime, datetime]]:
        return blocked_time(calendars[pid], snapshot.busy[pid], searched, now)

    required_busy = BusyIndex.from_bounds(bounds for pid in query.required for bounds in blocked(pid))
    optional_busy = {pid: BusyIndex.from_bounds(blocked(pid)) for pid in query.optional}
    step = query.granularity_minutes or min(calendars[pid].slot_minutes for pid in versions)
    # Ordered by start and needing no optional calendar, the walk may stop one past the limit; otherwise
    # every slot of the window is a contender.
    stops_early = query.order == EARLIEST and query.min_optional == 0
    wanted = query.limit + 1 if stops_early else MAX_WEIGHED_SLOTS + 1
    slots = _slots(required_busy, searched, query.duration, step, wanted)
    weighed_all = len(slots) <= MAX_WEIGHED_SLOTS
    if not weighed_all:
        # What was searched ends where the first slot not weighed starts: the agent continues from there.
        searched = Span(searched.start, slots[MAX_WEIGHED_SLOTS].start)
    candidates = []
    for slot in slots[:MAX_WEIGHED_SLOTS]:
        free_optional = [pid for pid, index in optional_busy.items() if index.is_free(slot)]
        if len(free_optional) >= query.min_optional:
            candidates.append(Candidate(slot, list(query.required), free_optional))
    if query.order == MOST_OPTIONAL:
        candidates.sort(key=lambda c: (-len(c.optional_free), c.span.start))
    reasons = {} if candidates else _why_none(snapshot, query, searched, step, found_slots=bool(slots))
    return SearchResult(
        candidates[: query.limit],
        versions,
        searched,
        truncated=len(candidates) > query.limit or not weighed_all,
        reasons=reasons,
        calendars=calendars,
    )


def _slots(busy: BusyIndex, window: Span, duration: timedelta, step: int, wanted: int) -> list[Span]:
    """The grid is walked only inside the common gaps: a busy month costs its free slots, not every step
    of it. (The grid is anchored to the epoch, so a gap's slots are the window's.)"""
    slots: list[Span] = []
    for gap in busy.gaps(window):
        if len(slots) >= wanted:
            break
        slots += grid_slots(
            window=gap, duration=duration, slot_minutes=step, busy=busy, limit=wanted - len(slots)
        )
    return slots


def _why_none(
    snapshot: Snapshot, query: SearchQuery, searched: Span, step: int, *, found_slots: bool
) -> dict[str, bool]:
    """Why a search found nothing, most basic cause first: the notice alone, the hours (with the notice),
    everyone's busy time, or too few optional attendees. Only on an empty answer."""
    if found_slots:
        return {"too_few_optional_free": True}
    required = [snapshot.calendars[pid] for pid in query.required]
    notice_only = BusyIndex.from_bounds(
        (s.start, s.end)
        for c in required
        for s in unavailable(
            None, c.timezone, searched, now=snapshot.now, min_notice_minutes=c.min_notice_minutes
        )
    )
    if not _slots(notice_only, searched, query.duration, step, 1):
        return {"insufficient_notice": True}
    rules_only = BusyIndex.from_bounds(
        bounds for c in required for bounds in blocked_time(c, [], searched, snapshot.now)
    )
    if not _slots(rules_only, searched, query.duration, step, 1):
        return {"no_common_working_hours": True}
    return {"no_common_free_time": True}
