"""Acting on an existing hold or booking: commit, extend, release, pin, cancel.

Every change is a CAS: a status-checked UPDATE whose returned rows are compared with the group's. When
fewer rows moved, someone else moved the hold first, and moved_first() explains what it became.
"""

from __future__ import annotations

import hmac
from datetime import datetime
from typing import NoReturn

from django.db import connection, transaction
from django.db.models import F

from agentcal.clock import isoformat_z, server_now
from agentcal.db import InsertBatch, bound_cursor
from agentcal.errors import (
    BookingNotLive,
    HoldAlreadyCommitted,
    HoldAwaitingApproval,
    HoldEvicted,
    HoldExpired,
    HoldReleased,
    HoldTokenMismatch,
    NotFound,
    NotOwner,
    StaleFencingToken,
)
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.engine.auditing import audit_rejections, audit_reservation
from bookings.engine.budgets import budget_params, over_budget, spend_budget
from bookings.engine.fastpath import (
    RowsFor,
    commit_in_one_statement,
    one_statement_transaction,
)
from bookings.engine.groups import ReservationGroup, hash_token, ordered
from bookings.engine.locking import lock_calendars
from bookings.engine.statements import CLOCK_SQL, COMMIT_SQL, EXTEND_SQL, TRANSITION_SQL
from bookings.events import emit_event_of_a_statement, emit_reservation_event
from bookings.models import Calendar, Reservation, ReservationStatus
from bookings.selectors import reservation_group, reservation_rows_from
from bookings.spans import Span
from webhooks.models import EventType
from workspaces.actor import Actor

# --- The CAS and its explanations ---------------------------------------------------------------------


def transition_group(
    *,
    hold_id: str | None = None,
    booking_id: str | None = None,
    from_status: str,
    to_status: str,
    now: datetime,
    unexpired: bool = False,
) -> list[Reservation]:
    """Move the rows of one hold (or booking) from `from_status` to `to_status`; with `unexpired`,
    only rows whose hold has not lapsed by `now`. Returns the rows it moved, primary first."""
    column, key = ("hold_id", hold_id) if hold_id is not None else ("booking_id", booking_id)
    with bound_cursor() as cursor:
        cursor.execute(
            TRANSITION_SQL[column, unexpired],
            {"key": key, "from_status": from_status, "to_status": to_status, "now": now},
        )
        return ordered(reservation_rows_from(cursor.fetchall()))


def raise_not_live(head: Reservation, now: datetime) -> None:
    """Explain why a hold can no longer be acted on; return if it is live."""
    status = head.status_at(now)
    common = {"hold_id": head.hold_id, "hold_status": status}
    if status == ReservationStatus.EXPIRED:
        raise HoldExpired(f"Hold {head.hold_id} expired at {isoformat_z(head.expires_at)}.", **common)  # type: ignore[arg-type]
    if status == ReservationStatus.EVICTED:
        raise HoldEvicted(f"Hold {head.hold_id} was evicted by a higher-priority request.", **common)
    if status == ReservationStatus.RELEASED:
        raise HoldReleased(f"Hold {head.hold_id} was released.", **common)
    if status != ReservationStatus.HELD:
        raise HoldAlreadyCommitted(
            f"Hold {head.hold_id} is already {status}.", booking_id=head.booking_id, **common
        )


def moved_first(
    hold_id: str, *, now: datetime, head: Reservation | None = None, gated: bool = False
) -> NoReturn:
    """A hold's CAS moved fewer rows than the hold has: another transaction moved it first. Raise what
    it became by `now` (the clock the CAS decided by): expired, evicted, released, committed, or
    (`gated`) waiting for an approval. `head` is its primary row if the caller read it after the CAS;
    otherwise it is read here."""
    if head is None:
        head = ordered(Reservation.objects.filter(hold_id=hold_id))[0]
    raise_not_live(head, now)
    if gated:
        refuse_if_gated(head)
    # The primary row still reads live (another of the group's rows moved): not actionable as a whole.
    raise HoldExpired(f"Hold {hold_id} is no longer live.", hold_id=hold_id)


# --- Who may act ----------------------------------------------------------------------------------------


def owned_hold(*, actor: Actor, hold_id: str, hold_token: str) -> list[Reservation]:
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    head = rows[0]
    refuse_unless_owner(actor, head)
    if head.hold_token_hash is None or not hmac.compare_digest(head.hold_token_hash, hash_token(hold_token)):
        raise HoldTokenMismatch("The hold_token does not belong to this hold.")
    refuse_if_gated(head)
    return rows


def refuse_unless_owner(actor: Actor, head: Reservation) -> None:
    # Holding the hold_token is not enough: it travels through agent frameworks, logs and approvals,
    # and one agent must not be able to end or prolong another's reservation with it.
    if actor.agent is None or head.agent_id != actor.agent.pk:
        what = "hold" if head.booking_id is None else "booking"
        raise NotOwner(f"Only the agent that made this {what} may change it.")


def refuse_unless_person(actor: Actor) -> None:
    # The dashboard's own way in: a signed-in person acting as themselves, never an agent's key.
    if actor.agent is not None or not actor.user_email:
        raise NotOwner("Only a signed-in person of the workspace may end an agent's reservation this way.")


def refuse_if_gated(head: Reservation) -> None:
    if head.awaiting_approval and head.status == ReservationStatus.HELD:
        raise HoldAwaitingApproval(
            f"Hold {head.hold_id} waits for approval {head.awaiting_approval}; its decision commits or "
            "releases it (cancel the approval to let go of the hold).",
            hold_id=head.hold_id,
            approval_id=head.awaiting_approval,
        )


# --- Commit ---------------------------------------------------------------------------------------------


@audit_rejections(AuditEvent.COMMIT_REJECTED)
def hold_commit(
    *, actor: Actor, calendar: Calendar, hold_token: str, fencing_token: int | None = None
) -> ReservationGroup:
    """Phase 2: promote a live hold (all its calendars) to a booking."""
    token_hash = hash_token(hold_token)
    if actor.agent is not None and fencing_token is None and not connection.in_atomic_block:
        # The common commit, by its token, without reading the hold first; anything else it finds
        # (another owner, a gate, several calendars, a hold no longer live) is read and explained below.
        group = _commit_in_one_statement(actor=actor, calendar=calendar, token_hash=token_hash)
        if group is not None:
            return group
    known = (calendar, actor.agent) if actor.agent is not None else None
    rows = reservation_group(workspace=actor.workspace, known=known, hold_token_hash=token_hash)
    if not rows or rows[0].calendar_id != calendar.pk:
        raise NotFound(f"No hold with this hold_token on calendar {calendar.public_id}.")
    refuse_unless_owner(actor, rows[0])
    refuse_if_gated(rows[0])
    return _commit_hold(actor=actor, rows=rows, fencing_token=fencing_token, approved=False)


@audit_rejections(AuditEvent.COMMIT_REJECTED)
def hold_commit_approved(*, actor: Actor, hold_id: str) -> ReservationGroup:
    """Commit a hold whose approval a human granted: the server commits on the agent's behalf, with
    the same rules (CAS, still live) as the agent's own commit. `actor` is the requesting agent with
    the deciding human recorded on it."""
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    return _commit_hold(actor=actor, rows=rows, fencing_token=None, approved=True)


def _commit_hold(
    *, actor: Actor, rows: list[Reservation], fencing_token: int | None, approved: bool
) -> ReservationGroup:
    primary = rows[0]
    if len(rows) == 1 and fencing_token is None and not connection.in_atomic_block:
        group = _commit_in_one_statement(
            actor=actor, calendar=primary.calendar, hold=primary, approved=approved
        )
        if group is not None:
            return group
    batch = InsertBatch()
    with transaction.atomic(durable=True):
        now, _ = lock_calendars(sorted(r.calendar_id for r in rows))
        # A commit a person approved is counted, never refused: the person decided.
        spend_budget(actor, holds=0, bookings=1, enforced=not approved)
        with bound_cursor() as cursor:
            cursor.execute(COMMIT_SQL, {"now": now, "hold_id": primary.hold_id, "approved": approved})
            committed = {row_id: rest for row_id, *rest in cursor.fetchall()}
        if len(committed) != len(rows):
            moved_first(primary.hold_id, now=now, gated=True)
        if fencing_token is not None:
            _check_fencing_token(primary, fencing_token)  # raising rolls the commit back
        for row in rows:
            row.version, row.booking_id, row.committed_at, row.bump_window_ends_at = committed[row.pk]
            row.status = ReservationStatus.COMMITTED
        audit_reservation(
            AuditEvent.COMMIT_CREATED,
            actor=actor,
            row=primary,
            reservation_public_id=primary.booking_id or "",
            details={"hold_id": primary.hold_id, "from_hold": True},
            batch=batch,
        )
        emit_reservation_event(EventType.BOOKING_COMMITTED, rows, batch=batch)
        batch.execute()
    return ReservationGroup(rows=rows)


def _commit_in_one_statement(
    *,
    actor: Actor,
    calendar: Calendar,
    token_hash: str | None = None,
    hold: Reservation | None = None,
    approved: bool = False,
) -> ReservationGroup | None:
    """Commit a one-calendar hold on `calendar` (the agent's, by its token; or `hold`, read and checked
    by the caller), its audit row and event in one statement (bookings/engine/fastpath.py), which queues
    for the calendar's lock. None: by token, no live hold of the agent's alone on the calendar and free
    of approvals was found: the caller reads the hold and takes the general path, which explains the
    refusal or commits it. With `hold`, raises what it became if it is no longer live."""
    agent = actor.agent if hold is None else hold.agent
    assert agent is not None
    rows = RowsFor()
    budget = budget_params(actor, holds=0, bookings=1, enforced=not approved)
    with one_statement_transaction():
        # Their row-dependent fields (the booking's id, span and fencing token, the event's payload)
        # come from the row as the statement moves it.
        audit_record(
            event_type=AuditEvent.COMMIT_CREATED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            calendar_public_id=calendar.public_id,
            details={"hold_id": None, "from_hold": True},
            batch=rows,
        )
        emit_event_of_a_statement(
            EventType.BOOKING_COMMITTED, calendar=calendar, agent_id=agent.pk, batch=rows
        )
        outcome = commit_in_one_statement(
            calendar=calendar,
            agent_id=agent.pk,
            agent_public_id=agent.public_id,
            token_hash=token_hash,
            hold=hold,
            approved=approved,
            rows=rows,
            budget=budget,
        )
        if outcome.moved is None:
            transaction.set_rollback(True)  # nothing was written: drop the on-commit callbacks
    if not outcome.within_budget:
        raise over_budget(actor, holds=0)
    if outcome.moved is None:
        if hold is None:
            return None
        moved_first(hold.hold_id, now=outcome.now, gated=True)
    booked = outcome.moved
    booked.calendar, booked.agent = calendar, agent
    return ReservationGroup(rows=[booked])


def _check_fencing_token(hold: Reservation, presented: int) -> None:
    """Refuse a token older than one already issued for an overlapping range on this calendar."""
    newer = (
        Reservation.objects.overlapping(Span(hold.start_time, hold.end_time))
        .filter(calendar_id=hold.calendar_id, fencing_token__gt=presented)
        .exclude(hold_id=hold.hold_id)
        .order_by("-fencing_token")
        .values_list("fencing_token", flat=True)
        .first()
    )
    if presented != hold.fencing_token or newer is not None:
        current = max(hold.fencing_token, newer or 0)
        # One error code either way (the contract's); the detail says which it is.
        detail = (
            f"Fencing token {presented} is stale for hold {hold.hold_id}: {current} was issued since."
            if presented < current
            else f"Fencing token {presented} was never issued for hold {hold.hold_id}; its own is "
            f"{hold.fencing_token}."
        )
        raise StaleFencingToken(detail, presented_fencing_token=presented, current_fencing_token=current)


# --- Extend, pin, release -------------------------------------------------------------------------------


@audit_rejections(AuditEvent.HOLD_EXTEND_REJECTED)
def hold_extend(*, actor: Actor, hold_id: str, hold_token: str, ttl_seconds: int) -> ReservationGroup:
    """Heartbeat: push a live hold's expiry to now + ttl. No calendar lock: the set of live rows does
    not change, and the CAS below loses cleanly to a concurrent eviction or expiry."""
    rows = owned_hold(actor=actor, hold_id=hold_id, hold_token=hold_token)
    with transaction.atomic(durable=True):
        with bound_cursor() as cursor:
            cursor.execute(EXTEND_SQL, {"ttl": ttl_seconds, "hold_id": hold_id})
            fresh = ordered(reservation_rows_from(cursor.fetchall()))
        if len(fresh) != len(rows):
            with bound_cursor() as cursor:
                cursor.execute(CLOCK_SQL)  # the CAS's clock (now() is the transaction's start)
                clock = cursor.fetchone()
            assert clock is not None
            moved_first(hold_id, now=clock[0])
        audit_reservation(
            AuditEvent.HOLD_EXTENDED,
            actor=actor,
            row=fresh[0],
            reservation_public_id=hold_id,
            details={"ttl_seconds": ttl_seconds, "expires_at": isoformat_z(fresh[0].expires_at)},  # type: ignore[arg-type]
        )
    return ReservationGroup(rows=fresh)


@transaction.atomic(durable=True)
def hold_pin_expiry(
    *, actor: Actor, hold_id: str, until: datetime, reason: str, approval_id: str | None = None
) -> ReservationGroup:
    """Keep a live hold alive until `until` (an approval's expiry) instead of its TTL; CAS on live.

    With `approval_id` the hold is gated: the agent can no longer extend, commit or release it
    itself; the approval's decision does (hold_commit_approved / hold_release_unless_settled).
    Without it, any gate is lifted (an approval that was not created after all).
    """
    moved = (
        Reservation.objects.live_holds()
        .filter(hold_id=hold_id, calendar__workspace=actor.workspace)
        .update(expires_at=until, awaiting_approval=approval_id, version=F("version") + 1)
    )
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    if moved != len(rows):
        moved_first(hold_id, now=server_now(), head=rows[0])
    audit_reservation(
        AuditEvent.HOLD_EXTENDED,
        actor=actor,
        row=rows[0],
        reservation_public_id=hold_id,
        details={"expires_at": isoformat_z(until), "reason": reason},
    )
    return ReservationGroup(rows=rows)


@audit_rejections(AuditEvent.HOLD_RELEASE_REJECTED)
def hold_release(*, actor: Actor, hold_id: str, hold_token: str) -> ReservationGroup:
    rows = owned_hold(actor=actor, hold_id=hold_id, hold_token=hold_token)
    return _release_hold(actor=actor, hold_id=hold_id, rows=rows)


@audit_rejections(AuditEvent.HOLD_RELEASE_REJECTED)
def hold_release_by_person(*, actor: Actor, hold_id: str) -> ReservationGroup:
    """A signed-in person (an owner or admin: the dashboard checks the role) releases an agent's hold.
    The same CAS, audit row and `hold.released` webhook to the agent as the agent's own release; the
    audit row names the person. A hold gated by an approval is refused: its approval decides it."""
    refuse_unless_person(actor)
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    refuse_if_gated(rows[0])
    return _release_hold(actor=actor, hold_id=hold_id, rows=rows, agent_id=rows[0].agent.public_id)


def hold_release_unless_settled(*, actor: Actor, hold_id: str) -> ReservationGroup | None:
    """Release a hold if it is still live (an approval was denied, expired or cancelled); None if it
    already ended some other way (expired, evicted, released) — there is nothing left to undo."""
    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        return None
    try:
        return _release_hold(actor=actor, hold_id=hold_id, rows=rows)
    except (HoldExpired, HoldEvicted, HoldReleased, HoldAlreadyCommitted):
        return None


def _release_hold(
    *, actor: Actor, hold_id: str, rows: list[Reservation], agent_id: str | None = None
) -> ReservationGroup:
    """`agent_id`: the agent whose hold a person released, for the audit row (which names the person)."""
    if rows[0].status == ReservationStatus.RELEASED:
        return ReservationGroup(rows=rows)  # releasing twice is harmless: same answer, nothing written
    with transaction.atomic(durable=True):
        now, _ = lock_calendars(sorted(r.calendar_id for r in rows))
        released = transition_group(
            hold_id=hold_id,
            unexpired=True,
            from_status=ReservationStatus.HELD,
            to_status=ReservationStatus.RELEASED,
            now=now,
        )
        if len(released) != len(rows):
            moved_first(hold_id, now=now)
        audit_reservation(
            AuditEvent.HOLD_RELEASED,
            actor=actor,
            row=released[0],
            reservation_public_id=hold_id,
            details={"agent_id": agent_id} if agent_id else None,
        )
        emit_reservation_event(EventType.HOLD_RELEASED, released)
    return ReservationGroup(rows=released)


# --- Cancel ---------------------------------------------------------------------------------------------


@audit_rejections(AuditEvent.BOOKING_CANCEL_REJECTED)
def booking_cancel(*, actor: Actor, booking_id: str) -> ReservationGroup:
    rows = reservation_group(workspace=actor.workspace, booking_id=booking_id)
    if not rows:
        raise NotFound(f"No booking {booking_id} in this workspace.")
    refuse_unless_owner(actor, rows[0])
    return _cancel_booking(actor=actor, booking_id=booking_id, rows=rows)


@audit_rejections(AuditEvent.BOOKING_CANCEL_REJECTED)
def booking_cancel_by_person(*, actor: Actor, booking_id: str) -> ReservationGroup:
    """A signed-in person (an owner or admin: the dashboard checks the role) cancels an agent's booking.
    The same CAS, audit row and `booking.cancelled` webhook to the agent as the agent's own cancel (so
    invites and upstream copies follow); the audit row names the person."""
    refuse_unless_person(actor)
    rows = reservation_group(workspace=actor.workspace, booking_id=booking_id)
    if not rows:
        raise NotFound(f"No booking {booking_id} in this workspace.")
    return _cancel_booking(actor=actor, booking_id=booking_id, rows=rows, agent_id=rows[0].agent.public_id)


def _cancel_booking(
    *, actor: Actor, booking_id: str, rows: list[Reservation], agent_id: str | None = None
) -> ReservationGroup:
    """`agent_id`: the agent whose booking a person cancelled, for the audit row (which names the person)."""
    if rows[0].status == ReservationStatus.CANCELLED:
        return ReservationGroup(rows=rows)
    with transaction.atomic(durable=True):
        now, _ = lock_calendars(sorted(r.calendar_id for r in rows))
        cancelled = transition_group(
            booking_id=booking_id,
            from_status=ReservationStatus.COMMITTED,
            to_status=ReservationStatus.CANCELLED,
            now=now,
        )
        if len(cancelled) != len(rows):
            # A booking has no time rule to explain (a bump window does not end it): say what it is.
            status = (
                Reservation.objects.filter(booking_id=booking_id, is_primary=True)
                .values_list("status", flat=True)
                .first()
            )
            raise BookingNotLive(
                f"Booking {booking_id} is {status}.", booking_id=booking_id, booking_status=status
            )
        audit_reservation(
            AuditEvent.BOOKING_CANCELLED,
            actor=actor,
            row=cancelled[0],
            reservation_public_id=booking_id,
            details={"agent_id": agent_id} if agent_id else None,
        )
        emit_reservation_event(EventType.BOOKING_CANCELLED, cancelled)
    return ReservationGroup(rows=cancelled)
