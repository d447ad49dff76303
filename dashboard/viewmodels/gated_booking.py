"""The booking an approval would make (or made): the hold it gates, on each of its calendars in that
calendar's time zone, and anything that stands in its way (taken over, run out, the owner's own calendar
busy then), in words."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from approvals.models import Approval
from bookings.models import Reservation, ReservationStatus
from bookings.selectors import busy_blocks_over, hold_shares
from bookings.spans import Span
from dashboard.links import reservation_url
from dashboard.timeline import calendar_zone
from dashboard.wording import attendee_text, local_range, provider_name

MAX_ATTENDEES_SHOWN = 50


@dataclass
class Busy:
    """Time the owner's own calendar is busy, overlapping the hold."""

    source: str
    start_time: datetime
    end_time: datetime
    local: str


@dataclass
class CalendarShare:
    """The hold's row on one calendar (a hold may span several), as a person reads it."""

    reservation: Reservation
    local: str  # the time in the calendar's own zone
    zone_name: str
    url: str
    busy: list[Busy] = field(default_factory=list)


@dataclass
class GatedBooking:
    """The booking an approval would make (or made): the hold it gates, and what stands in its way."""

    hold_id: str
    primary: Reservation
    shares: list[CalendarShare]
    utc: str
    duration: str
    attendees: list[str]
    more_attendees: int
    state: str  # the hold's state in plain words
    state_kind: str  # css: live | booked | gone
    problems: list[str]  # why approving now would make no booking, or what overlaps it

    @property
    def can_be_made(self) -> bool:
        return self.state_kind == "live"

    @property
    def key(self) -> str:
        """Changes whenever anything the page shows of it changes (the live poll's "what I saw")."""
        facts = [
            (
                s.reservation.pk,
                s.reservation.status,
                s.reservation.version,
                [(b.start_time, b.end_time) for b in s.busy],
            )
            for s in self.shares
        ]
        return hashlib.sha256(repr((facts, self.state_kind)).encode()).hexdigest()[:16]


def gated_booking(approval: Approval, now: datetime) -> GatedBooking | None:
    """What the approval's hold is now; None when it gates no hold (or the hold's rows are gone)."""
    if not approval.hold_id:
        return None
    rows = hold_shares(workspace_id=approval.workspace_id, hold_id=approval.hold_id)
    if not rows:
        return None
    primary = rows[0]
    span = Span(primary.start_time, primary.end_time)
    busy_by_calendar: dict[int, list[Busy]] = {}
    for block in busy_blocks_over(span, [r.calendar_id for r in rows]):
        zone = calendar_zone(next(r.calendar for r in rows if r.calendar_id == block.calendar_id))
        busy_by_calendar.setdefault(block.calendar_id, []).append(
            Busy(
                provider_name(block.source),
                block.start_time,
                block.end_time,
                local_range(block.start_time, block.end_time, zone),
            )
        )
    shares = []
    for row in rows:
        zone = calendar_zone(row.calendar)
        shares.append(
            CalendarShare(
                reservation=row,
                local=local_range(row.start_time, row.end_time, zone),
                zone_name=zone.key,
                url=reservation_url(approval.workspace, row),
                busy=busy_by_calendar.get(row.calendar_id, []),
            )
        )
    state, kind, problems = hold_state(primary, now)
    for share in shares:
        for busy in share.busy:
            calendar = share.reservation.calendar.name
            problems.append(f"The owner's own calendar ({busy.source}) is busy {busy.local} on {calendar}.")
    attendees = primary.attendees if isinstance(primary.attendees, list) else [primary.attendees]
    return GatedBooking(
        hold_id=approval.hold_id,
        primary=primary,
        shares=shares,
        utc=local_range(primary.start_time, primary.end_time, ZoneInfo("UTC")) + " UTC",
        duration=meeting_length(primary.start_time, primary.end_time),
        attendees=[attendee_text(a) for a in attendees[:MAX_ATTENDEES_SHOWN]],
        more_attendees=max(len(attendees) - MAX_ATTENDEES_SHOWN, 0),
        state=state,
        state_kind=kind,
        problems=problems,
    )


def hold_state(row: Reservation, now: datetime) -> tuple[str, str, list[str]]:
    """The hold in plain words, a css kind, and what stops approving from making the booking."""
    status = row.status_at(now)
    if status == ReservationStatus.HELD:
        if row.awaiting_approval:
            return (
                "Held for this approval: the time stays blocked for other agents until it is decided.",
                "live",
                [],
            )
        return "Held.", "live", []
    if status == ReservationStatus.COMMITTED:
        booked = f"Booked ({row.booking_id})."
        if row.upstream_conflict_at is not None:
            return (
                booked,
                "booked",
                ["An event in the owner's own calendar now overlaps this booking (the booking is kept)."],
            )
        return booked, "booked", []
    if status == ReservationStatus.EVICTED:
        taker = row.displaced_by
        if taker is not None:
            who = f"{taker.agent.name}, priority {taker.priority} (higher than this hold's {row.priority})"
            reason = f"Taken over by {who}."
        else:
            reason = "Taken over by an event in the owner's own calendar."
        return reason, "gone", [f"{reason} Approving now cannot make this booking."]
    if status == ReservationStatus.EXPIRED:
        reason = "The hold ran out."
    elif status == ReservationStatus.RELEASED:
        reason = "The hold was released."
    elif status == ReservationStatus.BUMPED:
        reason = "Booked, then taken over by a higher-priority agent inside its bump window."
    elif status == ReservationStatus.CANCELLED:
        reason = "Booked, then cancelled."
    else:
        reason = f"The hold is {status}."
    if status in (ReservationStatus.BUMPED, ReservationStatus.CANCELLED):
        return reason, "gone", []
    return reason, "gone", [f"{reason} Approving now cannot make this booking."]


def meeting_length(start: datetime, end: datetime) -> str:
    minutes = round((end - start).total_seconds() / 60)
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")
