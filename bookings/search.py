"""Finding a time across calendars: the common free grid slots of required calendars, read in one snapshot.

Cost: three statements whatever the number of calendars (docs/architecture.md, "Finding a time across
calendars"); CPU O((R + B) log(R + B) + S·(1 + k)·log(R + B)) for R reservations, B busy blocks, S grid
steps in the window and k optional calendars.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction

from agentcal.db import bound_cursor
from agentcal.errors import NotFound
from bookings.engine.rules import check_span_length
from bookings.models import Calendar
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


def find_common_time(
    *,
    workspace_id: int,
    required: Sequence[str],
    optional: Sequence[str],
    min_optional: int,
    duration: timedelta,
    window: Span,
    granularity_minutes: int | None,
    limit: int,
    order: str,
) -> SearchResult:
    """Up to `limit` spans of `duration` on the grid inside `window`, free on every required calendar
    (live reservations, lapsed holds left out, and upstream busy blocks) and starting no earlier than
    the database's now; each says which optional calendars are free then.

    One REPEATABLE READ snapshot of three statements: the calendars (their versions, and now), every
    live reservation across them, every busy block across them. Then pure work: the required calendars'
    busy time merged into one BusyIndex (O(n log n)), the grid walked inside its gaps (O(n + S log n)),
    and each candidate checked against the k optional calendars' indexes (O(k log n) each).
    """
    public_ids = [*required, *optional]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute(
                f"SELECT {', '.join(_CALENDAR_COLUMNS)}, now()"
                " FROM bookings_calendar WHERE workspace_id = %s AND public_id = ANY(%s)",
                [workspace_id, public_ids],
            )
            rows = cursor.fetchall()
        calendars = {
            c.public_id: c for c in (Calendar.from_db("default", _CALENDAR_COLUMNS, row[:-1]) for row in rows)
        }
        missing = [pid for pid in public_ids if pid not in calendars]
        if missing:
            raise NotFound(f"No calendar {missing[0]} in this workspace.", missing_calendars=missing)
        now: datetime = rows[0][-1]
        check_span_length(Span(window.start, window.start + duration), [calendars[p] for p in required])
        by_pk = {c.pk: c.public_id for c in calendars.values()}
        busy: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
        params = overlap_params(by_pk, window)
        # Hand-written on the binary cursor: timestamps decoded in C. Through the ORM, parsing a month of
        # ten people's busy time from text took most of the search's time.
        with bound_cursor() as cursor:
            for table, condition in (
                ("bookings_reservation", f" AND {live('', now='now()')}"),
                ("bookings_busyblock", ""),
            ):
                cursor.execute(
                    f"SELECT calendar_id, start_time, end_time FROM {table}"
                    f" WHERE calendar_id = ANY(%(calendars)s) AND {overlaps('')}{condition}",
                    params,
                )
                for calendar_id, start, end in cursor.fetchall():
                    busy[by_pk[calendar_id]].append((start, end))
    versions = {pid: calendars[pid].version for pid in public_ids}
    # Calendar rules (working hours, date overrides, buffers, notice) will join here: each calendar's
    # rules become more closed (start, end) pairs appended to busy[public_id] for the window (buffers
    # widen its busy pairs), so the intersection below needs no change. Absent rules mean "any time".
    if window.end <= now:
        return SearchResult([], versions, window, truncated=False, reasons={"window_in_the_past": True})
    searched = Span(max(window.start, now), window.end)
    required_busy = BusyIndex.from_bounds(bounds for pid in required for bounds in busy[pid])
    optional_busy = {pid: BusyIndex.from_bounds(busy[pid]) for pid in optional}
    step = granularity_minutes or min(calendars[pid].slot_minutes for pid in public_ids)
    # Ordered by start and needing no optional calendar, the walk may stop one past the limit; otherwise
    # every slot of the window is a contender.
    stops_early = order == EARLIEST and min_optional == 0
    wanted = limit + 1 if stops_early else MAX_WEIGHED_SLOTS + 1
    slots: list[Span] = []
    # The grid is walked only inside the required calendars' common gaps: a busy month costs its free
    # slots, not every step of it. (The grid is anchored to the epoch, so a gap's slots are the window's.)
    for gap in required_busy.gaps(searched):
        if len(slots) >= wanted:
            break
        slots += grid_slots(
            window=gap, duration=duration, slot_minutes=step, busy=required_busy, limit=wanted - len(slots)
        )
    weighed_all = len(slots) <= MAX_WEIGHED_SLOTS
    if not weighed_all:
        # What was searched ends where the first slot not weighed starts: the agent continues from there.
        searched = Span(searched.start, slots[MAX_WEIGHED_SLOTS].start)
    candidates = []
    for slot in slots[:MAX_WEIGHED_SLOTS]:
        free_optional = [pid for pid, index in optional_busy.items() if index.is_free(slot)]
        if len(free_optional) >= min_optional:
            candidates.append(Candidate(slot, list(required), free_optional))
    if order == MOST_OPTIONAL:
        candidates.sort(key=lambda c: (-len(c.optional_free), c.span.start))
    reasons = {}
    if not candidates:
        reasons = {"no_common_free_time": True} if not slots else {"too_few_optional_free": True}
    return SearchResult(
        candidates[:limit],
        versions,
        searched,
        truncated=len(candidates) > limit or not weighed_all,
        reasons=reasons,
    )
