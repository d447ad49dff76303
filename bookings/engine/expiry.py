"""Lapsed holds: expired lazily by the write that finds them in its way, or by the background sweep.

A hold lapses by the database's clock at its `expires_at` (Reservation.is_lapsed_at(), bookings.sql
.lapsed_hold()); from then on it blocks nothing, whether or not its row says 'expired' yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from agentcal.clock import isoformat_z
from agentcal.db import InsertBatch, bound_cursor
from agentcal.metrics import HOLD_EXPIRIES
from audit.events import AuditEvent
from bookings.engine.auditing import audit_reservation
from bookings.engine.groups import groups
from bookings.engine.locking import lock_calendars
from bookings.engine.rules import upstream_blocker_from
from bookings.engine.statements import CLEAR_THE_WAY_SQL, EXPIRE_LAPSED_SQL
from bookings.events import emit_reservation_event
from bookings.models import BusyBlock, Reservation
from bookings.selectors import RESERVATION_ROW_WIDTH, reservation_rows_from
from bookings.spans import Span
from bookings.sql import overlap_params
from webhooks.models import EventType


@dataclass
class InTheWay:
    """What clear_the_way() found in a span: live reservations (start order) and the first upstream
    busy block, if any."""

    reservations: list[Reservation]
    upstream: BusyBlock | None = None


def clear_the_way(*, calendar_ids: Sequence[int], span: Span, now: datetime, batch: InsertBatch) -> InTheWay:
    """Expire the lapsed holds in the span (so they never block the write at hand) and return what is
    in its way. Usually all empty: one round trip either way."""
    with bound_cursor() as cursor:
        cursor.execute(CLEAR_THE_WAY_SQL, overlap_params(calendar_ids, span, now=now))
        found = cursor.fetchall()
    if not found:
        return InTheWay([])
    by_kind: dict[str, list[Any]] = {"expired": [], "live": [], "upstream": []}
    for kind, *values in found:
        by_kind[kind].append(values)
    if by_kind["expired"]:
        expired = reservation_rows_from(v[:RESERVATION_ROW_WIDTH] for v in by_kind["expired"])
        _announce_expired(expired, lazily=True, batch=batch)
    live = reservation_rows_from(v[:RESERVATION_ROW_WIDTH] for v in by_kind["live"])
    upstream = [upstream_blocker_from(v[RESERVATION_ROW_WIDTH:]) for v in by_kind["upstream"]]
    return InTheWay(sorted(live, key=lambda r: r.start_time), upstream[0] if upstream else None)


def holds_expire_lapsed(limit: int = 100) -> int:
    """The background sweep: expire lapsed holds nobody has written over, calendar by calendar.

    Only for the state people and agents see, and for `hold.expired` events: writes never wait for it.
    Safe on several workers at once: each calendar is handled under its lock and each hold moves by
    CAS, so a hold is expired (and audited, and announced) exactly once.
    """
    # By the groups' primary rows: the index of held primary rows bounds the read by the holds alive or
    # lapsed, not by every reservation ever made.
    calendar_ids = list(
        Reservation.objects.lapsed_holds()
        .filter(is_primary=True)
        .values_list("calendar_id", flat=True)
        .distinct()[:limit]
    )
    expired = 0
    for calendar_id in calendar_ids:
        with transaction.atomic(durable=True):
            now, _ = lock_calendars([calendar_id])
            rows = _expire_lapsed_holds(calendar_ids=[calendar_id], now=now)
            expired += len(groups(rows))
    return expired


def _expire_lapsed_holds(*, calendar_ids: Sequence[int], now: datetime) -> list[Reservation]:
    """The sweep's expiry: every lapsed hold on the calendars (the caller holds their locks)."""
    with bound_cursor() as cursor:
        cursor.execute(EXPIRE_LAPSED_SQL, {"calendars": list(calendar_ids), "now": now})
        expired = reservation_rows_from(cursor.fetchall())
    _announce_expired(expired, lazily=False)
    return expired


def _announce_expired(expired: list[Reservation], *, lazily: bool, batch: InsertBatch | None = None) -> None:
    """Audit and announce holds just expired (time did it, not the request that noticed)."""
    for rows in groups(expired):
        head = rows[0]
        audit_reservation(
            AuditEvent.HOLD_EXPIRED,
            actor=None,
            row=head,
            reservation_public_id=head.hold_id,
            details={"expires_at": isoformat_z(head.expires_at), "expired_lazily": lazily},  # type: ignore[arg-type]
            batch=batch,
        )
        emit_reservation_event(EventType.HOLD_EXPIRED, rows, batch=batch)
        transaction.on_commit(HOLD_EXPIRIES.labels("lazy" if lazily else "sweep").inc)
