"""A reservation's drawer on the calendar page: its details, its audit history in words, and what an owner
may do to it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.urls import reverse

from audit.events import AuditEvent
from audit.models import Outcome
from audit.selectors import reservation_trail
from bookings.models import Reservation, ReservationStatus
from bookings.selectors import reservation_displacer, reservation_other_shares
from bookings.spans import Span
from dashboard.links import reservation_day_url
from dashboard.timeline import block_kind, calendar_zone, has_upstream_conflict
from dashboard.viewmodels.booking_move import MoveForm, span_history
from workspaces.models import Workspace
from workspaces.selectors import agent_names

# A reservation's audit history in its drawer: the most recent rows (a heartbeating hold writes one per
# extension; the audit trail has them all).
HISTORY_LIMIT = 50

# What each audited step in a reservation's life reads as in its drawer (others show their event type).
HISTORY_LABELS: dict[str, str] = {
    AuditEvent.HOLD_CREATED: "Hold placed",
    AuditEvent.HOLD_EXTENDED: "Hold extended",
    AuditEvent.HOLD_EXTEND_REJECTED: "Extension refused",
    AuditEvent.HOLD_RELEASED: "Hold released",
    AuditEvent.HOLD_RELEASE_REJECTED: "Release refused",
    AuditEvent.HOLD_EXPIRED: "Hold expired",
    AuditEvent.HOLD_EVICTED: "Taken over by a higher priority",
    AuditEvent.COMMIT_CREATED: "Booked",
    AuditEvent.COMMIT_REJECTED: "Commit refused",
    AuditEvent.BOOKING_BUMPED: "Bumped by a higher priority",
    AuditEvent.BOOKING_CANCELLED: "Booking cancelled",
    AuditEvent.BOOKING_CANCEL_REJECTED: "Cancel refused",
    AuditEvent.BOOKING_MOVED: "Moved",
    AuditEvent.BOOKING_MOVE_REJECTED: "Move refused",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT: "Owner's own calendar overlaps it",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT_RESOLVED: "Overlap with the owner's calendar cleared",
    AuditEvent.BOOKING_ATTENDEE_RESPONDED: "Attendee answered",
    AuditEvent.BOOKING_ATTENDEE_RESPONSE_REJECTED: "Attendee answer not applied",
    AuditEvent.INBOX_INVITE_CANCELLED: "Cancellation sent to attendees",
    AuditEvent.INBOX_INVITE_CANCELLED_BY_ORGANIZER: "Organizer cancelled the invite",
    AuditEvent.APPROVAL_REQUESTED: "Approval requested",
    AuditEvent.APPROVAL_APPROVED: "Approved",
    AuditEvent.APPROVAL_DENIED: "Denied",
    AuditEvent.APPROVAL_SETTLED: "Approval settled",
    AuditEvent.APPROVAL_EXPIRED: "Approval expired",
    AuditEvent.APPROVAL_CANCELLED: "Approval cancelled",
}


def reservation_drawer(
    *,
    workspace: Workspace,
    reservation: Reservation,
    now: datetime,
    confirm: bool,
    can_manage: bool,
    move_form: MoveForm | None = None,
) -> dict[str, Any]:
    """What the drawer shows at `now` (the database's clock). `confirm`: the owner asked to confirm the
    action first (shown only to those who `can_manage`). `move_form`: a refused move's form, shown again
    as it was sent."""
    calendar = reservation.calendar
    kind, label = block_kind(reservation, now)
    action = reservation_action(reservation, kind)
    public_id = reservation.booking_id or reservation.hold_id
    zone = calendar_zone(calendar)
    history = reservation_history(workspace, reservation)
    movable = action == "cancel" and can_manage
    return {
        "calendar": calendar,
        "r": reservation,
        "public_id": public_id,
        "kind": kind,
        "label": label,
        "zone_name": str(zone),
        "now": now,
        "is_bumpable": reservation.is_bumpable_at(now) and reservation.status == ReservationStatus.COMMITTED,
        "upstream_conflict": has_upstream_conflict(reservation),
        "attendees": attendee_rows(reservation.attendees),
        "also_on": reservation_other_shares(reservation),
        "displaced_by": reservation_displacer(reservation),
        "history": history,
        "spans": span_history(reservation, history, zone),
        "move_form": (
            move_form or MoveForm.for_span(Span(reservation.start_time, reservation.end_time), zone)
        )
        if movable
        else None,
        "move_url": reverse(
            "dashboard:calendar_reservation_move", args=[workspace.slug, calendar.public_id, public_id]
        )
        if movable
        else "",
        "action": action,
        "confirm": confirm and action is not None and can_manage,
        "drawer_url": reverse(
            "dashboard:calendar_reservation", args=[workspace.slug, calendar.public_id, public_id]
        ),
        "action_url": reverse(
            f"dashboard:calendar_reservation_{action}", args=[workspace.slug, calendar.public_id, public_id]
        )
        if action
        else "",
        "calendar_url": reservation_day_url(workspace, reservation),
    }


def reservation_action(reservation: Reservation, kind: str) -> str | None:
    """What an owner may do to it: cancel a booking, release a live hold no approval gates (its approval
    decides it), or nothing (it has ended)."""
    if reservation.status == ReservationStatus.COMMITTED:
        return "cancel"
    if kind == "held" and not reservation.awaiting_approval:
        return "release"
    return None


def attendee_rows(raw: Any) -> list[dict[str, str]]:
    """The agent's attendee list as people read it. It is the agent's free-form JSON: entries that are
    not {"email", "name", "response"} objects show as their text."""
    if not isinstance(raw, list):
        return []
    people = []
    for entry in raw:
        if isinstance(entry, dict):
            people.append(
                {
                    "email": str(entry.get("email") or ""),
                    "name": str(entry.get("name") or ""),
                    # Set from the attendee's reply to the booking's invite (inboxes.invites).
                    "response": str(entry.get("response") or ""),
                }
            )
        else:
            people.append({"email": "", "name": str(entry), "response": ""})
    return people


def reservation_history(workspace: Workspace, reservation: Reservation) -> list[dict[str, Any]]:
    """The audit rows of this hold and the booking it became, oldest first: what happened and who did it
    (a person by email, an agent by name, else AgentCal itself: the expiry sweep, say)."""
    ids = [reservation.hold_id, *([reservation.booking_id] if reservation.booking_id else [])]
    # Nothing about a reservation is audited before it exists: bounding the time lets the timestamp index
    # do the work (there is no index by reservation id). The minute covers the clocks of a write's
    # transaction, which starts before its row's created_at.
    records = reservation_trail(
        workspace=workspace,
        public_ids=ids,
        since=reservation.created_at - timedelta(minutes=1),
        limit=HISTORY_LIMIT,
    )
    names = agent_names(workspace, (r.agent_public_id for r in records if r.agent_public_id))
    return [
        {
            "record": record,
            "label": HISTORY_LABELS.get(record.event_type, record.event_type),
            "who": record.actor_user
            or names.get(record.agent_public_id, record.agent_public_id)
            or "AgentCal",
            "rejected": record.outcome == Outcome.REJECTED,
        }
        for record in records
    ]
