"""Finding a time across calendars: the common free grid slots of required calendars, within each one's
rules (working hours in its own zone, date overrides, buffers, notice).

Reading is one snapshot of three statements whatever the number of calendars (`read_calendars`), two
more each time an earliest-first search reads twice as far; the rest is pure (`rank`). CPU
O((R + B + H) log(R + B + H) + S·(1 + k)·log(R + B + H)) for R reservations, B busy blocks, H open-hours
spans (days × intervals a day), S grid steps inside the common gaps and k optional calendars.
docs/architecture.md, "Finding a time across calendars"."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models, transaction

from agentcal.db import bound_cursor, loaded
from agentcal.errors import NotFound
from agentcal.metrics import SEARCH_SECONDS
from bookings.engine.rules import check_span_length
from bookings.models import Calendar
from bookings.rules import closed_by_rules, unavailable
from bookings.spans import BusyIndex, Span, grid_slots
from bookings.sql import each_calendar, live, overlap_params, overlaps

EARLIEST = "earliest"
MOST_OPTIONAL = "most_optional"
# A search that cannot stop at the first free slots (ranked by optional attendees, or needing some of
# them free) weighs at most this many slots, the earliest: a month on a one-minute grid would be ~45,000
# slots times every optional calendar. Past it the answer says `truncated`.
MAX_WEIGHED_SLOTS = 5_000
ORDERS = (EARLIEST, MOST_OPTIONAL)
MAX_SEARCH_CALENDARS = 20
MAX_CANDIDATES = 50
# How much of the window an earliest-first search reads first (then twice as far each time): three days
# hold the first candidates of most weeks, weekends included.
FIRST_STRETCH = timedelta(days=3)
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
    moving: str | None = None  # the hold id of a booking being moved: its own time is not in its way


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
    """The calendars (by public id), their busy time (live reservations and upstream busy blocks, each
    widened by its calendar's buffer, as (start, end) pairs) and the database's now, as one snapshot saw
    them. The required calendars' busy time is one merged list (under REQUIRED): a search needs only
    their union; each optional calendar's is its own."""

    calendars: dict[str, Calendar]
    required: tuple[str, ...]
    busy: dict[str, list[tuple[datetime, datetime]]]
    now: datetime
    read_until: datetime  # busy time is known from the later of the window's start and now, to here
    ignoring: str | None = None  # a hold id whose rows are not busy (SearchQuery.moving)


REQUIRED = ""  # Snapshot.busy's key for the required calendars' union (no public id is empty)


def find_common_time(*, workspace_id: int, query: SearchQuery) -> SearchResult:
    """Up to `query.limit` spans on the grid inside the window, free on every required calendar and
    within its rules; each says which optional calendars are free then. One REPEATABLE READ snapshot."""
    started = time.perf_counter()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        result = search(workspace_id=workspace_id, query=query)
    SEARCH_SECONDS.labels("search").observe(time.perf_counter() - started)
    return result


def search(*, workspace_id: int, query: SearchQuery, now: datetime | None = None) -> SearchResult:
    """The search, in the caller's transaction (`now`: the clock deciding which holds have lapsed).

    The earliest candidates with no optional attendee needed are usually in the window's first days: it
    reads those first, then twice as far each time until more than `limit` are found, or — when the
    first stretch had none at all (few candidates far apart, where stretches would cost the most) — the
    rest of the window at once. Each read adds to the snapshot; each rank is over all read so far.
    """
    window = query.window
    stops_early = query.order == EARLIEST and query.min_optional == 0
    snapshot = read_calendars(
        workspace_id,
        query.required,
        window,
        optional=query.optional,
        now=now,
        first=FIRST_STRETCH if stops_early else None,
        ignoring=query.moving,
    )
    while True:
        result = rank(snapshot, replace(query, window=Span(window.start, snapshot.read_until)))
        if snapshot.read_until >= window.end or len(result.candidates) > query.limit or result.truncated:
            break
        begin = max(window.start, snapshot.now)
        reach = begin + 2 * (snapshot.read_until - begin) if result.candidates else window.end
        read_busy(snapshot, Span(snapshot.read_until, min(window.end, reach)))
    if snapshot.read_until < window.end:
        # Stopped early with more than `limit` candidates, they are the earliest of the whole window:
        # what reading all of it would have answered.
        result.searched = Span(result.searched.start, window.end)
    return result


def read_calendars(
    workspace_id: int,
    required: Sequence[str],
    window: Span,
    *,
    optional: Sequence[str] = (),
    now: datetime | None = None,
    first: timedelta | None = None,
    ignoring: str | None = None,
) -> Snapshot:
    """The calendars and what is busy on them in `window` (only its `first` stretch from now on, if
    given): two statements. `now`: the clock that decides which holds have lapsed (the lock's, under a
    lock); else the statement's own now()."""
    public_ids = [*required, *optional]
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
    snapshot = Snapshot(
        calendars, tuple(required), defaultdict(list), now or rows[0][-1], window.start, ignoring
    )
    begin = max(window.start, snapshot.now)
    until = window.end if first is None else min(window.end, begin + first)
    if begin < until:
        read_busy(snapshot, Span(begin, until))
    snapshot.read_until = max(until, begin)
    return snapshot


def read_busy(snapshot: Snapshot, window: Span) -> None:
    """Add what is busy on the snapshot's calendars in `window` to it, and say it was read that far: one
    statement. A row that also overlaps a window read before is added again, which the busy indexes
    merge away."""
    snapshot.read_until = max(snapshot.read_until, window.end)
    calendars = list(snapshot.calendars.values())
    by_pk = {c.pk: c.public_id for c in calendars}
    # Read wide enough to see what a buffer keeps free just outside the window.
    widest = max((c.buffer for c in calendars), default=timedelta(0))
    params = overlap_params(
        list(by_pk),
        Span(window.start - widest, window.end + widest),
        now=snapshot.now,
        required=[snapshot.calendars[pid].pk for pid in snapshot.required],
        pads=[int(c.buffer.total_seconds()) for c in calendars],
        ignoring=snapshot.ignoring,
    )
    with bound_cursor() as cursor:
        cursor.execute(_BUSY_SQL[bool(widest)], params)
        for key, start, end in cursor.fetchall():
            snapshot.busy[by_pk[key] if key else REQUIRED].append((start, end))


_LIVE_ON_K = f"""
SELECT calendar_id, start_time, end_time FROM bookings_reservation
 WHERE calendar_id = k.id AND {overlaps("")} AND {live("", now="%(now)s")}
   AND hold_id IS DISTINCT FROM %(ignoring)s
"""


def _busy_sql(*, padded: bool) -> str:
    """Every live reservation and busy block of the calendars in the window (`padded`: widened by its
    calendar's buffer, %(pads)s in %(calendars)s' order), merged by PostgreSQL (range_agg): the required
    calendars' into one union (key 0), each optional calendar's on its own. A month of ten people's
    10,000 rows comes back as the few hundred stretches of time that matter, decoded in C."""
    pad = "make_interval(secs => %(pads)s[array_position(%(calendars)s, x.calendar_id)])"
    start, end = (
        (f"x.start_time - {pad}", f"x.end_time + {pad}") if padded else ("x.start_time", "x.end_time")
    )
    return f"""
SELECT g.key, lower(m.span), upper(m.span)
  FROM (SELECT CASE WHEN x.calendar_id = ANY(%(required)s) THEN 0 ELSE x.calendar_id END AS key,
               range_agg(tstzrange({start}, {end})) AS busy
          FROM (SELECT r.calendar_id, r.start_time, r.end_time FROM {each_calendar(_LIVE_ON_K, alias="r")}
                UNION ALL
                SELECT calendar_id, start_time, end_time FROM bookings_busyblock
                 WHERE calendar_id = ANY(%(calendars)s) AND {overlaps("")}) AS x
         GROUP BY 1) AS g,
       unnest(g.busy) AS m(span)
"""


_BUSY_SQL = {padded: _busy_sql(padded=padded) for padded in (False, True)}


def _calendar_from(row: Sequence[Any]) -> Calendar:
    calendar = loaded(Calendar, _CALENDAR_COLUMNS, row)
    for column in _JSON_COLUMNS:
        value = getattr(calendar, column)
        if isinstance(value, str):
            setattr(calendar, column, json.loads(value))
    return calendar


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

    required_busy = required_index(snapshot, searched)
    optional_busy = {
        pid: BusyIndex.from_bounds([*snapshot.busy[pid], *closed_by_rules(calendars[pid], searched, now)])
        for pid in query.optional
    }
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


def required_index(snapshot: Snapshot, window: Span) -> BusyIndex:
    """The required calendars' busy time in `window`, with what their rules close."""
    closed = (
        b for pid in snapshot.required for b in closed_by_rules(snapshot.calendars[pid], window, snapshot.now)
    )
    return BusyIndex.from_bounds([*snapshot.busy[REQUIRED], *closed])


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
    """Why a search found nothing, most basic cause first: no slot of the duration fits the window's grid
    at all, the notice alone, the hours (with the notice), everyone's busy time, or too few optional
    attendees. Only on an empty answer."""
    if found_slots:
        return {"too_few_optional_free": True}
    # Nothing on any calendar is needed to explain this one: blaming the notice would send an agent to
    # wait, when only a longer window helps.
    if not _slots(BusyIndex.from_bounds([]), searched, query.duration, step, 1):
        return {"window_too_short": True}
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
        bounds for c in required for bounds in closed_by_rules(c, searched, snapshot.now)
    )
    if not _slots(rules_only, searched, query.duration, step, 1):
        return {"no_common_working_hours": True}
    return {"no_common_free_time": True}
