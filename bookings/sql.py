"""The time rules and the overlap test as SQL fragments: every hand-written statement that asks "does
this reservation block that span at that moment?" is built from these, so the rule is written once.

The same rules in Python are the `Reservation` methods and queryset (bookings/models.py); a change to a
rule changes all three. Each fragment takes the reservation table's alias (`"r"`, or `""`) and the SQL
for "now", always a database clock: NOW_PARAM (the lock's time), `now()` or `clock_timestamp()`.
Upstream busy blocks block like a frozen booking, through the same `overlaps()`.

Design: docs/architecture.md, "Where the time rules live".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bookings.models import MAX_RESERVATION_LENGTH
from bookings.spans import Span

# The write transaction's one "now": bound as a parameter, read when the calendar lock was granted.
NOW_PARAM = "%(now)s"


def _qualified(alias: str) -> str:
    return f"{alias}." if alias else ""


def lapsed_hold(alias: str, *, now: str) -> str:
    """A hold whose expiry has come. Still 'held' in the table until a writer or the sweep expires it,
    but it blocks nothing. At exactly `expires_at` it has lapsed (`<=`): the expiry is the first moment
    the span is free again. Python: `Reservation.is_lapsed_at()`."""
    r = _qualified(alias)
    return f"{r}status = 'held' AND {r}expires_at <= {now}"


def live_hold(alias: str, *, now: str) -> str:
    """A hold that has not lapsed: the negation of lapsed_hold() for a held row (every held row has an
    expiry: the `reservation_held_has_expiry` constraint)."""
    r = _qualified(alias)
    return f"{r}status = 'held' AND {r}expires_at > {now}"


def live(alias: str, *, now: str) -> str:
    """A reservation that blocks its span at `now`: held or committed, minus lapsed holds. The
    exclusion constraint's condition is only the first half (a lapsed hold is still 'held' there),
    which is why a writer expires lapsed holds in its span before it inserts. Python:
    `Reservation.is_live_at()`; ORM: `Reservation.objects.live()`."""
    r = _qualified(alias)
    return f"{r}status IN ('held', 'committed') AND NOT ({lapsed_hold(alias, now=now)})"


def bumpable(alias: str, *, now: str) -> str:
    """Of a live reservation: may a strictly higher priority take it over at `now`? A hold always; a
    commit only while its bump window is open. From `bump_window_ends_at` on, it is frozen. Python:
    `Reservation.is_bumpable_at()`."""
    r = _qualified(alias)
    return f"({r}status = 'held' OR {r}bump_window_ends_at > {now})"


def overlaps(alias: str, *, params: str = "") -> str:
    """The reservation's (or busy block's) range overlaps the span, both half-open `[start, end)` like
    the exclusion constraint (back-to-back meetings fit). `start_time > earliest` adds nothing
    logically (no reservation or block is longer than MAX_RESERVATION_LENGTH), but it bounds the
    (calendar_id, start_time) index scan to a window instead of the calendar's whole history.
    Parameters: overlap_params() (with `params`, their names prefixed: a second span in one statement)."""
    r = _qualified(alias)
    return (
        f"{r}start_time < %({params}end)s AND {r}start_time > %({params}earliest)s"
        f" AND {r}end_time > %({params}start)s"
    )


def each_calendar(lookup: str, *, alias: str, calendars: str = "%(calendars)s") -> str:
    """FROM items that run `lookup`, a SELECT of reservations by `calendar_id = k.id`, once for each id
    in `calendars`, as the subquery `alias`.

    One calendar at a time, a look-up reads through the (calendar_id, start_time) index whatever the
    statistics say. With `calendar_id = ANY(ids)`, on a table not yet analyzed, the planner read every
    live reservation through the exclusion constraint's index instead: that index's condition is the
    look-up's own, which makes it look small (docs/performance-notes.md, "Planned once"). `OFFSET 0`
    keeps the planner from turning the look-up into a join of its own choosing."""
    return f"unnest({calendars}::bigint[]) AS k(id) CROSS JOIN LATERAL ({lookup} OFFSET 0) AS {alias}"


def unindexed(condition: str) -> str:
    """`condition` in a form the planner cannot match to a partial index's condition (in a WHERE
    clause, `(…) IS TRUE` selects the same rows): for a read of rows it already finds by another index,
    which a live-status condition would let it take through the exclusion constraint's index instead
    (see each_calendar()). ORM twin: agentcal.planner.Unindexed."""
    return f"({condition}) IS TRUE"


def overlap_params(calendar_ids: Iterable[int], span: Span, **more: Any) -> dict[str, Any]:
    """The parameters of overlaps(), and `calendars`, the ids every overlap look-up reads
    (each_calendar())."""
    return {"calendars": list(calendar_ids), **span_params(span), **more}


def span_params(span: Span, *, params: str = "") -> dict[str, Any]:
    """The span's parameters for overlaps(alias, params=...)."""
    return {
        f"{params}start": span.start,
        f"{params}end": span.end,
        f"{params}earliest": span.start - MAX_RESERVATION_LENGTH,
    }


def iso_z(expression: str) -> str:
    """A timestamptz as agentcal.clock.isoformat_z() writes it (UTC, `Z`, microseconds only when not
    zero); NULL stays NULL. For payload fields the database fills in."""
    return (
        f"(regexp_replace(to_char(({expression}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'),"
        r" '\.000000$', '') || 'Z')"
    )
