"""Calendar invites linked to the agent's holds and bookings (the iCalendar itself is inboxes.ical).

In: `invite_received` links a delivered message's REQUEST or CANCEL to the agent's hold or booking and
applies an authenticated attendee's REPLY to the booking's attendees under its version check; what it
found is the message's `calendar_event`, flagged (InviteFlag) when it changes nothing. Out:
`invite_request` keeps one BookingInvite per booking (UID, SEQUENCE, attendees so far) inside the send's
transaction. docs/architecture.md ("Calendar invites") has the rules.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import F

from agentcal.clock import isoformat_z
from agentcal.errors import BookingNotLive, NotFound
from agentcal.text import storable_text
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.events import emit_reservation_event
from bookings.models import Reservation, ReservationStatus
from inboxes.addresses import agent_address, workspace_domain
from inboxes.ical import MAX_ADDRESS_CHARS, MAX_SUMMARY_CHARS, CalendarInvite, calendar_event
from inboxes.models import BookingInvite, Direction, InviteResponse, Message, PartStat
from webhooks.models import EventType
from workspaces.models import Agent

logger = logging.getLogger(__name__)

# Attempts at the version-checked update of one reservation row's attendees before giving up (each
# failed attempt means another writer changed the row just then; the answer stays recorded anyway).
ATTENDEE_UPDATE_ATTEMPTS = 5
# PARTSTAT values a REPLY may apply to a booking: an answer, not a delegation or a "not yet".
ANSWERS = frozenset({PartStat.ACCEPTED, PartStat.DECLINED, PartStat.TENTATIVE})


class InviteFlag(models.TextChoices):
    """What `calendar_event.flag` says about an invite (null when there is nothing to say)."""

    MALFORMED = "malformed"  # the .ics could not be read; `problem` says why
    # A CANCEL for the linked hold/booking from the invite's organizer, authenticated.
    CANCELLED_BY_ORGANIZER = "cancelled_by_organizer"
    # A CANCEL from someone who is not the invite's organizer (for the agent's own invite: anyone).
    NOT_ORGANIZER = "not_organizer"
    # The mail's From is not authenticated (sender_authenticated): a REPLY is not applied, a CANCEL not
    # taken as the organizer's.
    SENDER_UNVERIFIED = "sender_unverified"
    # A REPLY recorded but not applied to the booking:
    SENDER_NOT_ATTENDEE = "sender_not_attendee"  # the mail's From is not the attendee answering
    NOT_INVITED = "not_invited"  # the attendee answering was never sent the invite
    OUTDATED_SEQUENCE = "outdated_sequence"  # it answers an earlier version of the invite
    NOT_AN_ANSWER = "not_an_answer"  # PARTSTAT is not accepted, declined or tentative


# --- Receiving -------------------------------------------------------------------------------------------


def invite_received(
    *, agent: Agent, message: Message, invite: CalendarInvite | None, sender_verified: bool
) -> dict[str, Any] | None:
    """Link a delivered message's invite (inside the delivery's transaction) and store the result as its
    `calendar_event`; returns it (None: the message has no calendar data). `sender_verified`: whether
    the mail's From is authenticated (inboxes.sender_auth.sender_authenticated)."""
    if invite is None:
        return None
    if invite.problem:
        event = calendar_event(invite, linked=None, flag=InviteFlag.MALFORMED)
    elif invite.method == "REPLY":
        event = _reply_received(agent=agent, message=message, invite=invite, sender_verified=sender_verified)
    elif invite.method == "REQUEST":
        event = calendar_event(invite, linked=_linked(agent=agent, invite=invite, message=message), flag=None)
    elif invite.method == "CANCEL":
        event = _cancel_received(agent=agent, message=message, invite=invite, sender_verified=sender_verified)
    else:  # PUBLISH, COUNTER, none at all: shown as it is, linked to nothing
        event = calendar_event(invite, linked=None, flag=None)
    Message.objects.filter(pk=message.pk).update(calendar_event=event)
    message.calendar_event = event
    return event


def _cancel_received(
    *, agent: Agent, message: Message, invite: CalendarInvite, sender_verified: bool
) -> dict[str, Any]:
    linked = _linked(agent=agent, invite=invite, message=message)
    if linked is None:
        return calendar_event(invite, linked=None, flag=None)
    sender = (message.from_address or {}).get("address", "").lower()
    organizer = (invite.organizer or {}).get("email", "")
    if _own_booking(agent=agent, uid=invite.uid) is not None:
        # The agent sent this invite: it is the organizer, and nobody else can cancel its meeting. (Every
        # attendee has the UID, and the ORGANIZER line is the sender's to write.)
        flag = InviteFlag.NOT_ORGANIZER
    elif not sender or sender != organizer:
        flag = InviteFlag.NOT_ORGANIZER
    elif not sender_verified:
        flag = InviteFlag.SENDER_UNVERIFIED
    else:
        flag = InviteFlag.CANCELLED_BY_ORGANIZER
    event = calendar_event(invite, linked=linked, flag=flag)
    if flag != InviteFlag.CANCELLED_BY_ORGANIZER:
        logger.info("CANCEL in %s linked to %s but not the organizer's: %s", message.public_id, linked, flag)
        return event
    audit_record(
        event_type=AuditEvent.INBOX_INVITE_CANCELLED_BY_ORGANIZER,
        outcome=Outcome.SUCCESS,
        actor=None,
        workspace_id=agent.workspace_id,
        reservation_public_id=linked,
        details={
            "agent": agent.public_id,
            "message": message.public_id,
            "uid": invite.uid,
            "organizer": organizer,
        },
    )
    return event


def _own_booking(*, agent: Agent, uid: str | None) -> str | None:
    """The booking whose invite the agent sent with this UID, if any."""
    return BookingInvite.objects.filter(uid=uid, agent=agent).values_list("booking_id", flat=True).first()


def _linked(*, agent: Agent, invite: CalendarInvite, message: Message) -> str | None:
    """The agent's hold or booking an invite is about: the booking whose invite the agent sent (our
    UID), else its live hold or committed booking with exactly the invite's span (a committed booking
    before a hold), else — for a CANCEL, whose time may since have moved — what an earlier invite with
    this UID was linked to."""
    own = _own_booking(agent=agent, uid=invite.uid)
    if own is not None:
        return own
    if invite.start is not None and invite.end is not None:
        matches = sorted(
            Reservation.objects.live()
            .filter(agent=agent, is_primary=True, start_time=invite.start, end_time=invite.end)
            .values_list("status", "hold_id", "booking_id", "pk"),
            key=lambda row: (row[0] != ReservationStatus.COMMITTED, -row[3]),
        )
        if matches:
            status, hold_id, booking_id, _ = matches[0]
            return booking_id if status == ReservationStatus.COMMITTED else hold_id
    if invite.method == "CANCEL":
        earlier = (
            Message.objects.filter(agent=agent, direction=Direction.INBOUND, calendar_event__uid=invite.uid)
            .exclude(pk=message.pk)
            .order_by("-pk")
            .values_list("calendar_event", flat=True)[:10]
        )
        for event in earlier:
            if event and event.get("linked"):
                return _current_id(str(event["linked"]))
    return None


def _current_id(public_id: str) -> str:
    """A hold's id, or its booking's once it was committed."""
    if public_id.startswith("hld_"):
        booking_id = (
            Reservation.objects.filter(hold_id=public_id, is_primary=True)
            .values_list("booking_id", flat=True)
            .first()
        )
        return booking_id or public_id
    return public_id


def _reply_received(
    *, agent: Agent, message: Message, invite: CalendarInvite, sender_verified: bool
) -> dict[str, Any]:
    booking_invite = BookingInvite.objects.filter(uid=invite.uid, agent=agent).first()
    if booking_invite is None:
        return calendar_event(invite, linked=None, flag=None)  # an answer to an invite the agent never sent
    sender = (message.from_address or {}).get("address", "").lower()
    responder = next((a for a in invite.attendees if a["email"] == sender), None)
    invited = {a["email"] for a in booking_invite.attendees}
    flag: str | None = None
    if responder is None:
        flag = InviteFlag.SENDER_NOT_ATTENDEE
        responder = invite.attendees[0] if invite.attendees else None
    elif not sender_verified:
        flag = InviteFlag.SENDER_UNVERIFIED
    elif responder["email"] not in invited:
        flag = InviteFlag.NOT_INVITED
    elif (invite.sequence or 0) < booking_invite.sequence:
        flag = InviteFlag.OUTDATED_SEQUENCE
    elif responder["status"] not in ANSWERS:
        flag = InviteFlag.NOT_AN_ANSWER
    event = calendar_event(invite, linked=booking_invite.booking_id, flag=flag)
    if responder is None:
        return event  # a REPLY without an ATTENDEE: nobody to record
    partstat = responder["status"]
    if partstat in PartStat.values:
        InviteResponse.objects.create(
            invite=booking_invite,
            email=responder["email"],
            partstat=partstat,
            sequence=invite.sequence or 0,
            applied=flag is None,
            reason=flag or "",
            message=message,
        )
    details = {
        "agent": agent.public_id,
        "message": message.public_id,
        "attendee": responder["email"],
        "sender": sender,
        "response": partstat,
    }
    if flag is not None:
        audit_record(
            event_type=AuditEvent.BOOKING_ATTENDEE_RESPONSE_REJECTED,
            outcome=Outcome.REJECTED,
            actor=None,
            workspace_id=agent.workspace_id,
            reservation_public_id=booking_invite.booking_id,
            failure_reason=flag,
            details=details,
        )
        return event
    rows = _apply_response(booking_invite.booking_id, email=responder["email"], partstat=partstat)
    audit_record(
        event_type=AuditEvent.BOOKING_ATTENDEE_RESPONDED,
        outcome=Outcome.SUCCESS,
        actor=None,
        workspace_id=agent.workspace_id,
        reservation_public_id=booking_invite.booking_id,
        details=details,
    )
    if rows:
        emit_reservation_event(
            EventType.BOOKING_ATTENDEE_RESPONDED,
            rows,
            attendee={"email": responder["email"], "name": responder["name"], "response": partstat},
            message_id=message.public_id,
        )
    return event


def _apply_response(booking_id: str, *, email: str, partstat: str) -> list[Reservation]:
    """Write the answer into the booking's `attendees` entries for `email` (objects with that "email"),
    on every row of the booking, each with a version-checked update: an agent's or the engine's
    concurrent change to the row is never overwritten, the answer is merged into what it wrote.
    Returns the booking's rows, primary first, as they are now."""
    rows = list(
        Reservation.objects.filter(booking_id=booking_id)
        .select_related("calendar", "agent")
        .order_by("-is_primary", "pk")
    )
    for row in rows:
        for _ in range(ATTENDEE_UPDATE_ATTEMPTS):
            attendees = _with_response(row.attendees, email=email, partstat=partstat)
            if attendees is None:
                break  # no entry for this address on this row: nothing to write
            moved = Reservation.objects.filter(pk=row.pk, version=row.version).update(
                attendees=attendees, version=F("version") + 1
            )
            if moved:
                row.attendees, row.version = attendees, row.version + 1
                break
            row.refresh_from_db(fields=["attendees", "version"])
        else:
            logger.warning("attendee answer for %s not written: row %s kept changing", booking_id, row.pk)
    return rows


def _with_response(attendees: Any, *, email: str, partstat: str) -> list[Any] | None:
    """`attendees` with "response" set on the entries for `email`; None if that changes nothing."""
    if not isinstance(attendees, list):
        return None
    changed = False
    updated: list[Any] = []
    for entry in attendees:
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("email"), str)
            and entry["email"].strip().lower() == email
            and entry.get("response") != partstat
        ):
            entry = {**entry, "response": partstat}
            changed = True
        updated.append(entry)
    return updated if changed else None


# --- Sending ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InviteDraft:
    invite: BookingInvite
    event: dict[str, Any]


def invite_request(*, agent: Agent, booking_id: str, recipients: list[str], subject: str) -> InviteDraft:
    """The REQUEST a new message carries for one of the agent's committed bookings (inside the send's
    transaction, which it extends with the booking's BookingInvite row, locked). Raises NotFound for no
    booking of this agent's, BookingNotLive when it is no longer committed."""
    head = Reservation.objects.filter(booking_id=booking_id, is_primary=True, agent=agent).first()
    if head is None:
        raise NotFound(f"No booking {booking_id} of this agent.", booking_id=booking_id)
    if head.status != ReservationStatus.COMMITTED:
        raise BookingNotLive(
            f"Booking {booking_id} is {head.status}: only a committed booking can be sent as an invite.",
            booking_id=booking_id,
            booking_status=head.status,
        )
    summary = storable_text(head.title or subject, MAX_SUMMARY_CHARS)
    # Created once per booking (a racing send's INSERT is ignored), then locked: two sends for one
    # booking, or a send and the CANCEL sweep, take turns on it.
    BookingInvite.objects.bulk_create(
        [
            BookingInvite(
                booking_id=booking_id,
                agent=agent,
                uid=f"{booking_id}@{workspace_domain(agent.workspace)}",
                start_time=head.start_time,
                end_time=head.end_time,
                summary=summary,
            )
        ],
        ignore_conflicts=True,
    )
    invite = BookingInvite.objects.select_for_update().get(booking_id=booking_id)
    invite.agent = agent  # the booking's owner, who made the row
    told = {a["email"] for a in invite.attendees}
    moved = (invite.start_time, invite.end_time) != (head.start_time, head.end_time)
    if moved or invite.summary != summary:
        # The booking changed since the attendees were last told: a new version of the invite.
        invite.sequence += 1
        invite.summary = summary
    if moved and told <= {address.lower() for address in recipients}:
        # Everyone told the old time hears the new one in this message. Otherwise the invite keeps saying
        # the old time, so the update sweep (inboxes.invite_updates) still tells the others of the move.
        invite.start_time, invite.end_time = head.start_time, head.end_time
    names = {
        entry["email"].strip().lower(): str(entry.get("name") or "")
        for entry in (head.attendees if isinstance(head.attendees, list) else [])
        if isinstance(entry, dict) and isinstance(entry.get("email"), str)
    }
    known = {a["email"] for a in invite.attendees}
    for address in recipients:
        email = address.lower()
        if email not in known:
            known.add(email)
            invite.attendees.append({"email": email, "name": names.get(email, "")[:MAX_ADDRESS_CHARS]})
    invite.save(update_fields=["sequence", "start_time", "end_time", "summary", "attendees"])
    event = outgoing_event(invite, method="REQUEST")
    event.update(start_time=isoformat_z(head.start_time), end_time=isoformat_z(head.end_time))
    return InviteDraft(invite=invite, event=event)


def invite_sent(draft: InviteDraft, message: Message) -> None:
    """Remember the message that carried the invite: a later CANCEL answers it, in its thread."""
    BookingInvite.objects.filter(pk=draft.invite.pk).update(last_message=message)


def outgoing_event(invite: BookingInvite, *, method: str, sequence: int | None = None) -> dict[str, Any]:
    agent = invite.agent
    return {
        "method": method,
        "uid": invite.uid,
        "sequence": invite.sequence if sequence is None else sequence,
        "start_time": isoformat_z(invite.start_time),
        "end_time": isoformat_z(invite.end_time),
        "summary": invite.summary,
        "organizer": {"email": agent_address(agent), "name": agent.name},
        "attendees": [
            {"email": a["email"], "name": a.get("name", ""), "status": PartStat.NEEDS_ACTION.value}
            for a in invite.attendees
        ],
        "linked": invite.booking_id,
        "flag": None,
        "problem": None,
    }
