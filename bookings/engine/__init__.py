"""The booking engine: every write to reservations goes through these functions.

How a write stays race-safe (see README, "How AgentCal decides"):

1. Cheap checks that need no lock: the span's shape (422 `booking_too_long`), the caller's allowed
   priority, and an unlocked look for a blocker the caller could never take over. That look is only
   an optimisation, so losers of a herd learn they lost without queueing; it decides nothing.
2. One transaction that first takes the row lock of every calendar it will touch, in id order, with
   `UPDATE calendar SET version = version + 1 RETURNING version, clock_timestamp()`. The lock
   serialises writers per calendar (concurrent inserts guarded only by the exclusion constraint
   deadlock under a herd), the new version is the fencing token, and the timestamp read *after* the
   lock is the "now" every decision in the transaction uses: the database's clock, never the web
   worker's.
3. Inside it: lapsed holds are expired lazily, takeovers are checked (strictly higher priority; live
   holds, or commits inside their bump window) and applied as status-checked CAS updates, and the new
   rows are inserted. The exclusion constraint `reservation_no_overlapping_live` is the guarantee:
   if any of the above were wrong, the INSERT would fail rather than double-book.
4. The audit row is written in the same transaction; a rejection is audited in its own transaction
   after the rollback (auditing.audit_rejections).

The common case — one calendar, nothing at all in the span — sends 1 to 4 as ONE statement in
autocommit (a transaction by itself: the pre-check, the lock taken NOWAIT, a check that its snapshot
is as new as the lock, the rows), and so does the commit of a one-calendar hold (`fastpath`). Every
other case, and every doubt (a busy lock, a stale snapshot), takes the transaction above.

The modules: `reserve` (hold_create, booking_create), `transitions` (commit, extend, pin, release,
cancel; release and cancel also by a signed-in person, from the dashboard), `expiry` (lapsed holds,
lazily and by the sweep), `locking` (calendar locks), `rules` (pure rules, no database),
`alternatives`, `statements` (the SQL, built from bookings/sql.py), `auditing`, `groups`
(ReservationGroup), `fastpath` (the common write as one statement), `calendars` (calendar settings
from a per-process copy). The time rules themselves live on `Reservation` (bookings/models.py)
and in bookings/sql.py. Calendar writes are in bookings/services.py (re-exported here).
"""

from __future__ import annotations

from agentcal.errors import SlotConflict
from bookings.engine.alternatives import ALTERNATIVES_COUNT, ALTERNATIVES_MAX_STEPS
from bookings.engine.calendars import calendar_for_write
from bookings.engine.expiry import holds_expire_lapsed
from bookings.engine.groups import ReservationGroup
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
    "MAX_LOCK_EXPANSIONS",
    "PAST_START_GRACE",
    "ReservationGroup",
    "SlotConflict",
    "booking_cancel",
    "booking_cancel_by_person",
    "booking_create",
    "calendar_create",
    "calendar_for_write",
    "calendar_update",
    "hold_commit",
    "hold_commit_approved",
    "hold_create",
    "hold_extend",
    "hold_pin_expiry",
    "hold_release",
    "hold_release_by_person",
    "hold_release_unless_settled",
    "holds_expire_lapsed",
]
