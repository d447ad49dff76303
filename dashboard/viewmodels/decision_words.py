"""What an approval's decision did, in one sentence with a link to what it made: the flash after deciding
and the approvals page's Recent list say the same words."""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString

from agentcal.moments import zone_label
from approvals.models import Approval, ApprovalStatus
from bookings.models import Reservation
from bookings.selectors import hold_primaries
from dashboard.links import reservation_url
from dashboard.timeline import calendar_zone
from dashboard.viewmodels.approval_detail import booking_error_text
from dashboard.viewmodels.approval_queue import QueueRow
from workspaces.models import Workspace


def starts_words(reservation: Reservation) -> str:
    """ "Thu 3 Dec 15:00 CET" in the calendar's own zone, named: the person deciding may be in another."""
    start = reservation.start_time.astimezone(calendar_zone(reservation.calendar))
    return f"{start:%a} {start.day} {start:%b %H:%M} {zone_label(start)}"


def decision_sentence(
    workspace: Workspace, approval: Approval, reservation: Reservation | None
) -> SafeString:
    """`reservation`: the primary row of the hold the approval gates (the booking it became), if any.

    "Booked <em>Board prep</em> on Berlin office, Thu 3 Dec 15:00 CET — see it on the calendar"."""
    status = approval.status
    what = reservation.title if reservation and reservation.title else approval.summary
    if status == ApprovalStatus.APPROVED and approval.booking_id and reservation:
        return format_html(
            'Booked <em>{}</em> on {}, {} — <a href="{}" data-testid="decision-link">'
            "see it on the calendar</a>",
            what,
            reservation.calendar.name,
            starts_words(reservation),
            reservation_url(workspace, reservation),
        )
    if status == ApprovalStatus.APPROVED and approval.booking_error:
        return format_html(
            "Approved <em>{}</em>, but nothing was booked: {}.",
            approval.summary,
            booking_error_text(approval.booking_error),
        )
    if status == ApprovalStatus.APPROVED and reservation:
        return format_html(
            'Approved <em>{}</em>; the booking is being made — <a href="{}" data-testid="decision-link">see '
            "it on the calendar</a>",
            approval.summary,
            reservation_url(workspace, reservation),
        )
    if status == ApprovalStatus.APPROVED:
        return format_html("Approved <em>{}</em> — the agent is told to go ahead.", approval.summary)
    if status == ApprovalStatus.DENIED:
        if approval.hold_id:
            where = f" on {reservation.calendar.name}" if reservation else ""
            return format_html(
                "Denied <em>{}</em> — nothing was booked{}; the agent is told.", approval.summary, where
            )
        return format_html("Denied <em>{}</em> — the agent is told not to go ahead.", approval.summary)
    if status == ApprovalStatus.CANCELLED:
        return format_html("The agent withdrew <em>{}</em> before anyone decided.", approval.summary)
    return format_html("<em>{}</em> expired before anyone decided; the agent is told.", approval.summary)


def with_decisions(workspace: Workspace, rows: list[QueueRow]) -> list[QueueRow]:
    """The Recent list's rows, each with its decision in words. One query for their holds."""
    hold_ids = [row.approval.hold_id for row in rows if row.approval.hold_id]
    reservations = {r.hold_id: r for r in hold_primaries(workspace, hold_ids)} if hold_ids else {}
    for row in rows:
        reservation = reservations.get(row.approval.hold_id or "")
        row.decision = decision_sentence(workspace, row.approval, reservation)
    return rows
