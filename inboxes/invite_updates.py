"""The update sweep: for every invite whose booking is still committed but now on another span than the
attendees were last told (the booking was moved), the invite goes out again as an update, once: the
same UID, SEQUENCE + 1, METHOD:REQUEST with the new times, in the invite's thread, to everyone it went
to. Attendees see one meeting that moved, not a cancel and a new one. It goes through the path every
outbound message takes (quotas, review-first), as the CANCEL does (inboxes.invite_cancels).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now

from agentcal.clock import isoformat_z
from agentcal.planner import InArray
from agentcal.text import one_line
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.models import Reservation
from inboxes.composing import message_queue
from inboxes.invite_cancels import invite_ever_left, invite_thread, invites_due, invites_sweep
from inboxes.invites import outgoing_event
from inboxes.models import BookingInvite
from inboxes.review import review_if_asked
from workspaces.actor import Actor


def invites_update_moved() -> int:
    """Periodic: send the update for every invite whose booking is committed on another span than its
    last REQUEST said, and whose meeting has not ended, in batches by id. Returns how many were sent. An
    agent over a send quota holds up only its own (invites_sweep)."""
    moved = (
        Reservation.objects.committed_unindexed()
        .filter(booking_id=OuterRef("booking_id"), is_primary=True)
        .filter(~Q(start_time=OuterRef("start_time")) | ~Q(end_time=OuterRef("end_time")))
    )
    # Only meetings that have not ended: as last told, or as booked now — a meeting that was over may
    # have been moved to a time still ahead. Both halves are index conditions (the bookings ahead as an
    # array of ids, which an OR cannot join).
    ahead = InArray(F("booking_id"), Reservation.objects.committed_not_ended().values("booking_id"))
    not_over = BookingInvite.objects.filter(cancelled_at__isnull=True).filter(
        Q(end_time__gt=Now()) | Q(ahead)
    )
    return invites_sweep(invites_due(not_over).filter(Exists(moved)), invite_update, what="update")


def invite_update(invite_pk: int) -> bool:
    """Queue the update for one invite whose booking moved, and record the new span and SEQUENCE on the
    invite in the same transaction, under its row lock: a second sweep running at the same time skips the
    locked row, or (once this commits) finds the invite saying what the booking says. Returns whether
    this call sent it."""
    with transaction.atomic(durable=True):
        invite = (
            BookingInvite.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("agent__workspace", "last_message__thread")
            .filter(pk=invite_pk, cancelled_at__isnull=True)
            .first()
        )
        if invite is None:
            return False  # another sweep has it, or the invite was cancelled
        head = (
            Reservation.objects.committed_unindexed()
            .filter(booking_id=invite.booking_id, is_primary=True)
            .first()
        )
        if head is None or (head.start_time, head.end_time) == (invite.start_time, invite.end_time):
            return False  # ended (the CANCEL sweep's), or already told
        was = (invite.start_time, invite.end_time)
        invite.start_time, invite.end_time = head.start_time, head.end_time
        if not invite_ever_left(invite):
            # Every message with the invite was discarded in review: nobody was invited, nobody to tell;
            # a later send of it says the new time anyway.
            BookingInvite.objects.filter(pk=invite.pk).update(
                start_time=head.start_time, end_time=head.end_time
            )
            return False
        agent = invite.agent
        invite.sequence += 1
        # The summary is the booking's title: any text, and a header must be one line.
        subject = one_line(f"Updated: {invite.summary}")
        message = message_queue(
            agent=agent,
            thread=invite_thread(invite, subject=subject),
            to=[a["email"] for a in invite.attendees],
            cc=[],
            subject=subject,
            text=(
                f"{invite.summary} has moved to {isoformat_z(head.start_time)} to "
                f"{isoformat_z(head.end_time)} (it was {isoformat_z(was[0])} to {isoformat_z(was[1])}).\n"
            ),
            html="",
            parent=invite.last_message,
            calendar_event=outgoing_event(invite, method="REQUEST"),
            invite_booking_id=invite.booking_id,
        )
        BookingInvite.objects.filter(pk=invite.pk).update(
            sequence=invite.sequence, start_time=head.start_time, end_time=head.end_time, last_message=message
        )
        audit_record(
            event_type=AuditEvent.INBOX_INVITE_UPDATED,
            outcome=Outcome.SUCCESS,
            actor=None,
            workspace_id=agent.workspace_id,
            reservation_public_id=invite.booking_id,
            details={
                "agent": agent.public_id,
                "message": message.public_id,
                "uid": invite.uid,
                "sequence": invite.sequence,
                "from": {"start_time": isoformat_z(was[0]), "end_time": isoformat_z(was[1])},
                "to": {"start_time": isoformat_z(head.start_time), "end_time": isoformat_z(head.end_time)},
            },
        )
    review_if_asked(message, Actor(workspace=agent.workspace, agent=agent))
    return True
