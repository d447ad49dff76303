"""The approval queue: pending requests newest first, then recent decisions, each with the calendar and
time a gated hold would book; and what an approval's status reads as, here and on its own page."""

from __future__ import annotations

from dataclasses import dataclass

from approvals.models import Approval, ApprovalStatus
from approvals.selectors import approval_queue
from bookings.selectors import hold_primaries
from dashboard.timeline import calendar_zone
from dashboard.wording import local_range
from workspaces.models import Workspace

RECENT_DECISIONS = 20

STATUS_LABELS: dict[str, str] = {
    ApprovalStatus.PENDING: "Waiting for a decision",
    ApprovalStatus.APPROVED: "Approved",
    ApprovalStatus.DENIED: "Denied",
    ApprovalStatus.EXPIRED: "Expired",
    ApprovalStatus.CANCELLED: "Withdrawn",
}
STATUS_EXPLAINED: dict[str, str] = {
    ApprovalStatus.PENDING: "Nobody has decided yet.",
    ApprovalStatus.APPROVED: "A person said yes.",
    ApprovalStatus.DENIED: "A person said no.",
    ApprovalStatus.EXPIRED: "Nobody decided in time; the agent was told it expired (not that it was denied).",
    ApprovalStatus.CANCELLED: "The agent withdrew its request before anyone decided.",
}


def status_label(status: str) -> str:
    return STATUS_LABELS.get(status, status)


@dataclass
class QueueRow:
    approval: Approval
    when: str  # for an approval that gates a hold: the calendar and time it would book
    decision: str = ""  # for a decided one: what the decision did, in words (decision_words)

    @property
    def status(self) -> str:
        # Only recent rows can be pending here: those whose time is up, awaiting the expiry sweep.
        return (
            ApprovalStatus.EXPIRED if self.approval.status == ApprovalStatus.PENDING else self.approval.status
        )

    @property
    def status_label(self) -> str:
        return status_label(self.status)

    @property
    def status_explained(self) -> str:
        return STATUS_EXPLAINED.get(self.status, "")


def queue_rows(workspace: Workspace) -> tuple[list[QueueRow], list[QueueRow]]:
    """(pending, recent decisions)."""
    pending, recent = approval_queue(workspace, recent=RECENT_DECISIONS)
    when = booking_times(workspace, [*pending, *recent])
    return (
        [QueueRow(a, when.get(a.hold_id or "", "")) for a in pending],
        [QueueRow(a, when.get(a.hold_id or "", "")) for a in recent],
    )


def booking_times(workspace: Workspace, approvals: list[Approval]) -> dict[str, str]:
    """By hold id, for approvals that gate a hold: "Sales team · Tue 3 Dec 2024, 14:00–14:30 (Europe/Berlin)".
    One query for the whole list."""
    hold_ids = [a.hold_id for a in approvals if a.hold_id]
    if not hold_ids:
        return {}
    times = {}
    for reservation in hold_primaries(workspace, hold_ids):
        zone = calendar_zone(reservation.calendar)
        local = local_range(reservation.start_time, reservation.end_time, zone)
        times[reservation.hold_id] = f"{reservation.calendar.name} · {local} ({zone.key})"
    return times
