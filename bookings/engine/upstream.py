"""Upstream busy time entering the engine: a synced calendar's changes replace its busy blocks under
the calendar lock, and what the new blocks land on is settled in the same transaction.

A hold under a new block is evicted (`hold.evicted`, reason `upstream_event`): it was only a claim,
and the person's own meeting wins. A committed booking is never moved or dropped: it is flagged
(`upstream_conflict_at`, `booking.upstream_conflict`) so its agent and the owner can sort it out, and
the flag clears if the upstream event moves away. Because holds and commits check blocks under the
same lock (statements.CLEAR_THE_WAY_SQL), a write and an ingestion on one calendar are serialised:
either the write sees the block and is refused, or the ingestion sees the write and settles it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from agentcal.clock import isoformat_z
from agentcal.db import InsertBatch, bound_cursor
from audit.events import AuditEvent
from bookings.engine.alternatives import alternatives
from bookings.engine.auditing import audit_reservation
from bookings.engine.groups import groups
from bookings.engine.locking import lock_calendars
from bookings.engine.transitions import transition_group
from bookings.events import emit_reservation_event
from bookings.models import MAX_RESERVATION_LENGTH, BusyBlock, Reservation, ReservationStatus
from bookings.selectors import RESERVATION_ROW_COLUMNS, RESERVATION_ROW_JOINS, reservation_rows_from
from bookings.spans import Span
from bookings.sql import NOW_PARAM
from webhooks.models import EventType


@dataclass(frozen=True)
class UpstreamChange:
    """The blocks one upstream event gives now (none: it no longer blocks, e.g. deleted or declined)."""

    event_key: str
    spans: Sequence[Span]


@dataclass
class UpstreamApplied:
    """What an ingestion changed: the blocks now in place for the changed events, and the holds
    evicted, bookings flagged and flags cleared because of them."""

    now: datetime
    blocks: int = 0
    evicted: list[str] = field(default_factory=list)
    conflicted: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)


class NeedMoreLocks(Exception):
    """A hold to evict also holds calendars whose locks this transaction lacks: roll back and run
    again with `lock_ids` including these (locks are only ever taken in id order)."""

    def __init__(self, calendar_ids: set[int]) -> None:
        super().__init__(f"needs the locks of calendars {sorted(calendar_ids)}")
        self.calendar_ids = calendar_ids


def pieces(span: Span) -> list[Span]:
    """A span cut into pieces no longer than MAX_RESERVATION_LENGTH (a fortnight's holiday becomes
    three blocks), so the bounded overlap scan of bookings/sql.py finds every one."""
    out, start = [], span.start
    while start < span.end:
        end = min(start + MAX_RESERVATION_LENGTH, span.end)
        out.append(Span(start, end))
        start = end
    return out


# The held and committed reservations on a calendar that overlap any of the touched spans and have not
# ended, each with the first upstream block (of any connection) over it now. Row-locked, and with no
# condition on a hold's expiry: a heartbeat may be extending a hold that looks lapsed in this
# statement's snapshot; the lock waits for it, and the caller judges liveness on the locked version.
# The join runs through the (calendar_id, start_time) index, bounded like bookings.sql.overlaps().
_LANDED_ON_SQL = f"""
SELECT {RESERVATION_ROW_COLUMNS}, blocker.start_time, blocker.end_time, blocker.source
  FROM bookings_reservation r {RESERVATION_ROW_JOINS}
  LEFT JOIN LATERAL (
      SELECT b.start_time, b.end_time, b.source FROM bookings_busyblock b
       WHERE b.calendar_id = r.calendar_id AND b.start_time < r.end_time AND b.end_time > r.start_time
         AND b.start_time > r.start_time - %(longest)s
       ORDER BY b.start_time LIMIT 1
  ) AS blocker ON true
 WHERE r.id IN (
       SELECT u.id FROM bookings_reservation u
         JOIN unnest(%(starts)s::timestamptz[], %(ends)s::timestamptz[]) AS t(s, e)
           ON u.start_time < t.e AND u.start_time > t.s - %(longest)s AND u.end_time > t.s
        WHERE u.calendar_id = %(calendar)s AND u.status IN ('held', 'committed') AND u.end_time > {NOW_PARAM})
 ORDER BY r.id
 FOR UPDATE OF r
"""

_DELETE_BLOCKS_SQL = """
DELETE FROM bookings_busyblock
 WHERE calendar_id = %(calendar)s AND connection_id = %(connection)s
   AND (%(all)s OR event_key = ANY(%(keys)s))
RETURNING start_time, end_time
"""


def upstream_blocks_replace(
    *,
    calendar_id: int,
    connection_id: int,
    source: str,
    changes: Sequence[UpstreamChange],
    replace_all: bool = False,
    lock_ids: Sequence[int] = (),
) -> UpstreamApplied:
    """Replace the blocks of the changed upstream events (with `replace_all`, every block of the
    connection: a full resync or a rebuild) and settle what they land on.

    Runs inside the caller's transaction (the sync records its progress in the same one), which it
    starts by taking the calendar's lock (and those of `lock_ids`). Raises NeedMoreLocks when a hold to
    evict spans calendars outside them.
    """
    assert transaction.get_connection().in_atomic_block, "runs inside the caller's transaction"
    locked = sorted({calendar_id, *lock_ids})
    now, _ = lock_calendars(locked)
    applied = UpstreamApplied(now=now)
    with bound_cursor() as cursor:
        cursor.execute(
            _DELETE_BLOCKS_SQL,
            {
                "calendar": calendar_id,
                "connection": connection_id,
                "all": replace_all,
                "keys": [c.event_key for c in changes],
            },
        )
        removed = {Span(start, end) for start, end in cursor.fetchall()}
    new_blocks = [
        BusyBlock(
            calendar_id=calendar_id,
            source=source,
            connection_id=connection_id,
            event_key=change.event_key,
            start_time=piece.start,
            end_time=piece.end,
        )
        for change in changes
        for span in change.spans
        for piece in pieces(span)
    ]
    BusyBlock.objects.bulk_create(new_blocks, batch_size=1000)
    applied.blocks = len(new_blocks)
    added = {b.span for b in new_blocks}
    # Only what changed needs settling: under an unchanged block no hold can be live (it was evicted,
    # or refused, when the block came) and every booking is already flagged. A rebuild that changes
    # nothing touches nothing.
    touched = sorted(removed ^ added, key=lambda span: span.start)
    if touched:
        _settle(calendar_id=calendar_id, touched=touched, locked=set(locked), applied=applied)
    return applied


def _settle(*, calendar_id: int, touched: list[Span], locked: set[int], applied: UpstreamApplied) -> None:
    """Evict the holds now under a block, flag the bookings now under one, clear the flags of bookings
    no longer under any."""
    now = applied.now
    with bound_cursor() as cursor:
        cursor.execute(
            _LANDED_ON_SQL,
            {
                "calendar": calendar_id,
                "now": now,
                "starts": [s.start for s in touched],
                "ends": [s.end for s in touched],
                "longest": MAX_RESERVATION_LENGTH,
            },
        )
        found = cursor.fetchall()
    if not found:
        return
    width = len(found[0]) - 3
    rows = reservation_rows_from(values[:width] for values in found)
    blockers = {row.pk: values[width:] for row, values in zip(rows, found, strict=True)}

    # Liveness is judged on the locked rows (a heartbeat that was in flight has committed by now).
    to_evict = sorted(
        {
            r.hold_id
            for r in rows
            if r.status == ReservationStatus.HELD and r.is_live_at(now) and blockers[r.pk][0]
        }
    )
    if to_evict:
        calendars = set(
            Reservation.objects.filter(hold_id__in=to_evict).values_list("calendar_id", flat=True)
        )
        if not calendars <= locked:
            raise NeedMoreLocks(calendars)

    batch = InsertBatch()
    for hold_id in to_evict:
        row = next(r for r in rows if r.hold_id == hold_id)
        moved = transition_group(
            hold_id=hold_id,
            from_status=ReservationStatus.HELD,
            to_status=ReservationStatus.EVICTED,
            now=now,
            unexpired=True,
        )
        if moved:
            _announce_eviction(moved, blocker=_blocker(blockers[row.pk], row), now=now, batch=batch)
            applied.evicted.append(hold_id)

    for row in rows:  # one row per booking: all are on this calendar
        if row.status != ReservationStatus.COMMITTED:
            continue
        blocked = blockers[row.pk][0] is not None
        if blocked and row.upstream_conflict_at is None:
            _flag_conflict(row, blocker=_blocker(blockers[row.pk], row), now=now, batch=batch)
            applied.conflicted.append(row.booking_id or "")
        elif not blocked and row.upstream_conflict_at is not None:
            _clear_conflict(row, batch=batch)
            applied.resolved.append(row.booking_id or "")
    batch.execute()


def _blocker(values: Sequence[object], row: Reservation) -> dict[str, str]:
    start, end, source = values
    return {
        "calendar": row.calendar.public_id,
        "source": str(source),
        "start_time": isoformat_z(start),  # type: ignore[arg-type]
        "end_time": isoformat_z(end),  # type: ignore[arg-type]
    }


def _announce_eviction(
    rows: list[Reservation], *, blocker: dict[str, str], now: datetime, batch: InsertBatch
) -> None:
    (rows,) = groups(rows)
    head = rows[0]
    audit_reservation(
        AuditEvent.HOLD_EVICTED,
        actor=None,
        row=head,
        reservation_public_id=head.hold_id,
        details={"reason": "upstream_event", "victim_agent_id": head.agent.public_id, "upstream": blocker},
        batch=batch,
    )
    emit_reservation_event(
        EventType.HOLD_EVICTED,
        rows,
        reason="upstream_event",
        upstream=blocker,
        alternatives=alternatives([r.calendar for r in rows], Span(head.start_time, head.end_time), now=now),
        batch=batch,
    )


def _flag_conflict(row: Reservation, *, blocker: dict[str, str], now: datetime, batch: InsertBatch) -> None:
    # This calendar's row only: a booking spanning several linked calendars is flagged per calendar.
    Reservation.objects.filter(pk=row.pk).update(upstream_conflict_at=now)
    row.upstream_conflict_at = now
    rows = [row]
    audit_reservation(
        AuditEvent.BOOKING_UPSTREAM_CONFLICT,
        actor=None,
        row=row,
        reservation_public_id=row.booking_id or row.hold_id,
        details={"agent_id": row.agent.public_id, "upstream": blocker},
        batch=batch,
    )
    emit_reservation_event(EventType.BOOKING_UPSTREAM_CONFLICT, rows, upstream=blocker, batch=batch)


def _clear_conflict(row: Reservation, *, batch: InsertBatch) -> None:
    Reservation.objects.filter(pk=row.pk).update(upstream_conflict_at=None)
    audit_reservation(
        AuditEvent.BOOKING_UPSTREAM_CONFLICT_RESOLVED,
        actor=None,
        row=row,
        reservation_public_id=row.booking_id or row.hold_id,
        details={"agent_id": row.agent.public_id},
        batch=batch,
    )
