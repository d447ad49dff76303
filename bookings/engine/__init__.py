"""The booking engine: every write to reservations goes through these functions.

Each write takes the row lock of every calendar it touches, in id order, and decides at the
database's clock as read after the lock; the exclusion constraint `reservation_no_overlapping_live`
stands behind every decision (a wrong one fails the INSERT rather than double-books). The audit row
and outbox event are written in the same transaction. The common write (one calendar, nothing in the
span) is one statement (`fastpath`).

Design and the modules: docs/architecture.md, "The engine's write path".
"""

from __future__ import annotations

from agentcal.errors import SlotConflict
from bookings.engine.alternatives import ALTERNATIVES_COUNT, ALTERNATIVES_MAX_STEPS
from bookings.engine.calendars import calendar_for_write, calendars_for_write
from bookings.engine.expiry import holds_expire_lapsed
from bookings.engine.find_and_hold import FoundAndHeld, hold_found_time
from bookings.engine.groups import ReservationGroup
from bookings.engine.move import BUMPED_MOVE_WINDOW, booking_move
from bookings.engine.reserve import MAX_LOCK_EXPANSIONS, booking_create, hold_create
from bookings.engine.rules import PAST_START_GRACE
from bookings.engine.transitions import (
    booking_cancel,
    booking_cancel_by_person,
    hold_commit,
    hold_commit_approved,
    hold_extend,
    hold_pin_expiry,
    hold_release,
    hold_release_by_person,
    hold_release_unless_settled,
)
from bookings.services import calendar_create, calendar_update

__all__ = [
    "ALTERNATIVES_COUNT",
    "ALTERNATIVES_MAX_STEPS",
    "BUMPED_MOVE_WINDOW",
    "FoundAndHeld",
    "MAX_LOCK_EXPANSIONS",
    "PAST_START_GRACE",
    "ReservationGroup",
    "SlotConflict",
    "booking_cancel",
    "booking_cancel_by_person",
    "booking_create",
    "booking_move",
    "calendar_create",
    "calendar_for_write",
    "calendars_for_write",
    "calendar_update",
    "hold_commit",
    "hold_commit_approved",
    "hold_create",
    "hold_extend",
    "hold_found_time",
    "hold_pin_expiry",
    "hold_release",
    "hold_release_by_person",
    "hold_release_unless_settled",
    "holds_expire_lapsed",
]
