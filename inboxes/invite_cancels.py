"""The CANCEL sweep: for every invite whose booking is no longer committed (cancelled, bumped, gone), a
CANCEL (SEQUENCE + 1) goes out once, as an ordinary outbound message in the invite's thread: the agent's
quotas and review-first apply to it as to any other. No CANCEL when no message with the invite ever left
review: nobody was invited; nor once the meeting, as last told, is over: calendars show it as past.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.db.models.functions import Now

from agentcal.clock import isoformat_z
from agentcal.errors import QuotaExceeded
from agentcal.planner import InArray
from agentcal.text import one_line
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.models import Reservation
from inboxes.composing import message_queue
from inboxes.invites import outgoing_event
from inboxes.models import BookingInvite, Message, MessageStatus, Thread
from inboxes.review import review_if_asked
from workspaces.actor import Actor

logger = logging.getLogger(__name__)

SWEEP_BATCH = 200
# The longest an invite's CANCEL or update refused over the agent's send quota waits before the sweep
# tries it again.
QUOTA_RETRY_SECONDS = 3600


def invites_cancel_ended() -> int:
    """Periodic: send the CANCEL for every invite whose booking is no longer committed (cancelled,
    bumped, gone) and whose meeting, as last told, has not ended, in batches by id. Returns how many were
    sent. An agent over a send quota holds up only its own CANCELs (invites_sweep)."""
    committed = Reservation.objects.committed_unindexed().filter(booking_id=OuterRef("booking_id"))
    # Only meetings that, as the attendees were last told, have not ended: a CANCEL for one that is over
    # tells them nothing.
    not_over = BookingInvite.objects.filter(cancelled_at__isnull=True, end_time__gt=Now())
    return invites_sweep(invites_due(not_over).filter(~Exists(committed)), invite_cancel, what="CANCEL")


def invites_due(candidates: QuerySet[BookingInvite]) -> QuerySet[BookingInvite]:
    """The candidates that are not waiting out a refusal over the agent's send quota. Every past meeting's
    invite stays open, so a sweep must read only invites whose meeting is not over (`candidates`, through
    an index); they are found first, as an array of ids the invites are then looked up by, so that no
    statistics can lead the planner to join them the other way round, from every committed booking."""
    return BookingInvite.objects.filter(InArray(F("pk"), candidates.values("pk"))).filter(
        Q(next_try_at__isnull=True) | Q(next_try_at__lte=Now())
    )


def invites_sweep(due: QuerySet[BookingInvite], send: Callable[[int], bool], *, what: str) -> int:
    """Call `send` for every invite in `due`, in batches by id; how many it sent. An agent over a send
    quota holds up only its own: at its first refusal all of its due invites wait (`next_try_at`) and the
    rest of the run passes them by, so every other agent's mail still goes out."""
    sent = 0
    refused_agents: set[int] = set()
    after = 0
    while batch := list(due.filter(pk__gt=after).order_by("pk").values_list("pk", "agent_id")[:SWEEP_BATCH]):
        after = batch[-1][0]
        for invite_pk, agent_id in batch:
            if agent_id in refused_agents:
                continue
            try:
                sent += send(invite_pk)
            except QuotaExceeded as exc:
                refused_agents.add(agent_id)
                # The quota's own answer when it has one, but no later than an hour: a limit of 0 names no
                # time, and a person may raise a limit at any moment.
                wait = min(exc.retry_after_seconds or QUOTA_RETRY_SECONDS, QUOTA_RETRY_SECONDS)
                waiting = due.filter(agent_id=agent_id).update(next_try_at=Now() + timedelta(seconds=wait))
                logger.info(
                    "%s %s(s) of agent %s wait %ss: over its %s quota",
                    waiting,
                    what,
                    agent_id,
                    wait,
                    exc.quota,
                )
    return sent


def invite_cancel(invite_pk: int) -> bool:
    """Queue the CANCEL for one invite whose booking ended, and mark the invite cancelled in the same
    transaction, under its row lock: a second sweep running at the same time skips the locked row, or
    (once this commits) finds it cancelled. Returns whether this call sent it."""
    with transaction.atomic(durable=True):
        invite = (
            BookingInvite.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("agent__workspace", "last_message__thread")
            .filter(pk=invite_pk, cancelled_at__isnull=True)
            .first()
        )
        if invite is None:
            return False  # another sweep has it, or sent it already
        if Reservation.objects.committed_unindexed().filter(booking_id=invite.booking_id).exists():
            return False
        agent = invite.agent
        if not invite_ever_left(invite):
            # Every message with the invite was discarded in review: nobody was invited, nobody to tell.
            BookingInvite.objects.filter(pk=invite.pk).update(cancelled_at=Now())
            return False
        sequence = invite.sequence + 1
        parent = invite.last_message
        # The summary is the booking's title: any text, and a header must be one line.
        subject = one_line(f"Cancelled: {invite.summary}")
        thread = invite_thread(invite, subject=subject)
        # The path every outbound message takes: the agent's quotas and review-first apply to it too.
        message = message_queue(
            agent=agent,
            thread=thread,
            to=[a["email"] for a in invite.attendees],
            cc=[],
            subject=subject,
            text=(
                f"{invite.summary} ({isoformat_z(invite.start_time)} to {isoformat_z(invite.end_time)})"
                " has been cancelled.\n"
            ),
            html="",
            parent=parent,
            calendar_event=outgoing_event(invite, method="CANCEL", sequence=sequence),
            invite_booking_id=invite.booking_id,
        )
        BookingInvite.objects.filter(pk=invite.pk).update(
            sequence=sequence, cancelled_at=Now(), last_message=message
        )
        audit_record(
            event_type=AuditEvent.INBOX_INVITE_CANCELLED,
            outcome=Outcome.SUCCESS,
            actor=None,
            workspace_id=agent.workspace_id,
            reservation_public_id=invite.booking_id,
            details={
                "agent": agent.public_id,
                "message": message.public_id,
                "uid": invite.uid,
                "sequence": sequence,
            },
        )
    review_if_asked(message, Actor(workspace=agent.workspace, agent=agent))
    return True


def invite_ever_left(invite: BookingInvite) -> bool:
    """Whether any message with the invite got past review (every one discarded: nobody was invited)."""
    carriers = Message.objects.filter(agent_id=invite.agent_id, invite_booking_id=invite.booking_id)
    return carriers.exclude(status=MessageStatus.DISCARDED).exists()


def invite_thread(invite: BookingInvite, *, subject: str) -> Thread:
    """Where a message about a sent invite goes: the thread of the last message that carried it, or a
    thread of its own when that message is gone."""
    if invite.last_message is not None:
        return invite.last_message.thread
    return Thread.objects.create(
        agent=invite.agent, subject=subject, counterpart=invite.attendees[0]["email"]
    )
