"""Calendar invites in agents' mail: iCalendar (.ics) in and out.

In: parse_mail collects a message's `text/calendar` parts and `.ics` attachments and `invite_read` reads
the first one that is an event (pure; a broken one is described, never raised). When the message is
delivered, `invite_received` links the invite to the agent's hold or booking and stores what it found as
the message's `calendar_event`:

- REQUEST and CANCEL link to the booking whose invite the agent sent (the UID is ours), else to the
  agent's live hold or committed booking with exactly the invite's span. A CANCEL is flagged
  `cancelled_by_organizer` (and audited) only when it comes from the invite's ORGANIZER, authenticated;
  it never cancels anything itself: the agent decides. For the agent's own invite the agent is the
  organizer, so a CANCEL of it from anyone else is flagged `not_organizer`, as is one whose sender is not
  its ORGANIZER; an unauthenticated organizer's is `sender_unverified`. Each stays linked, for the agent
  to see.
- REPLY to an invite the agent sent records the attendee's answer and writes it into the booking's
  `attendees` entry for that address, but only when the attendee answering is the sender of the mail
  (anyone can write any ATTENDEE line) and that sender is authenticated; otherwise it is recorded, not
  applied, and flagged.

Authenticated (`sender_authenticated`) means the From address is known to be the sender's, not only
claimed: a receiving server we trust (INBOUND_TRUSTED_AUTHSERV_IDS, its Authentication-Results) found
DMARC passing, or a valid DKIM signature of the From address's domain; or the mail never came from
outside at all — one of this installation's agents wrote it and our own local delivery put it in the
inbox (InboundRaw.local_delivery, set only by that code path, never by anything in the bytes). With no
trusted server configured, no stranger's mail is authenticated: answers and cancellations from outside
are shown, flagged, and change nothing.

Out: `invite_request` (inside message_send's transaction) keeps one BookingInvite per booking — its UID,
SEQUENCE and the attendees so far — and gives the message its `calendar_event`; at delivery
`invite_attach` writes the .ics from that (the same bytes on every retry) as a `text/calendar;
method=…` alternative plus an `invite.ics` attachment, the way Gmail and Outlook send invites. The
periodic `invites_cancel_ended` sends a CANCEL (SEQUENCE + 1), once, for every invite whose booking is no
longer committed (unless no message with the invite ever left review). The CANCEL is an ordinary outbound
message in the invite's thread: the agent's quotas and review-first apply to it as to any other.
"""

from __future__ import annotations

import email.parser
import email.policy
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import icalendar
from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import models, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now

from agentcal.clock import isoformat_z
from agentcal.errors import BookingNotLive, NotFound, QuotaExceeded
from agentcal.text import one_line, storable_text
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.events import emit_reservation_event
from bookings.models import Reservation, ReservationStatus
from inboxes.addresses import agent_address, workspace_domain
from inboxes.models import (
    BookingInvite,
    Direction,
    InboundRaw,
    InviteResponse,
    Message,
    MessageStatus,
    PartStat,
    Thread,
)
from webhooks.models import EventType
from workspaces.actor import Actor
from workspaces.models import Agent

logger = logging.getLogger(__name__)

PRODID = "-//AgentCal//Inbox invites//EN"
# An invite is a few kilobytes; anything this big is not one we read.
MAX_ICS_BYTES = 256 * 1024
MAX_ATTENDEES = 100
MAX_SUMMARY_CHARS = 500
MAX_ADDRESS_CHARS = 320
# Attempts at the version-checked update of one reservation row's attendees before giving up (each
# failed attempt means another writer changed the row just then; the answer stays recorded anyway).
ATTENDEE_UPDATE_ATTEMPTS = 5
SWEEP_BATCH = 200
# The longest a CANCEL refused over the agent's send quota waits before the sweep tries it again.
QUOTA_RETRY_SECONDS = 3600
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


# --- Reading ---------------------------------------------------------------------------------------------


class InvalidInvite(ValueError):
    pass


@dataclass(frozen=True)
class CalendarInvite:
    """The first event of a message's calendar data. With `problem` set nothing else is reliable."""

    method: str | None = None
    uid: str | None = None
    sequence: int | None = None
    start: datetime | None = None
    end: datetime | None = None
    summary: str = ""
    organizer: dict[str, str] | None = None
    # [{"email": ..., "name": ..., "status": PARTSTAT lowercased}]
    attendees: list[dict[str, str]] = field(default_factory=list)
    problem: str = ""


def is_calendar_part(content_type: str, filename: str) -> bool:
    return content_type in ("text/calendar", "application/ics") or filename.lower().endswith(".ics")


def invite_read(parts: list[bytes]) -> CalendarInvite | None:
    """The invite in a message's calendar parts: the first that reads as one (Gmail and Outlook send the
    same event twice, inline and attached); None without calendar parts."""
    problem = ""
    for data in parts:
        try:
            return _read_one(data)
        except Exception as exc:  # the data is a stranger's: any failure to read it is "malformed"
            problem = problem or _describe(exc)
    return CalendarInvite(problem=problem) if parts else None


def _describe(exc: Exception) -> str:
    detail = str(exc) if isinstance(exc, InvalidInvite) else f"{type(exc).__name__}: {exc}"
    return storable_text(detail, 300)


def _read_one(data: bytes) -> CalendarInvite:
    if len(data) > MAX_ICS_BYTES:
        raise InvalidInvite(f"calendar data over {MAX_ICS_BYTES} bytes")
    calendar = icalendar.Calendar.from_ical(data)
    if not isinstance(calendar, icalendar.Calendar):
        raise InvalidInvite("not a VCALENDAR")
    events = calendar.events
    if not events:
        raise InvalidInvite("no VEVENT")
    event = events[0]
    broken = [name for name, _ in event.errors if name in ("DTSTART", "DTEND", "DURATION", "SEQUENCE")]
    if broken:
        raise InvalidInvite(f"unreadable {', '.join(broken)}")
    uid = _text(event.get("UID"), 255)
    if not uid:
        raise InvalidInvite("the VEVENT has no UID")
    if "DTSTART" not in event:
        raise InvalidInvite("the VEVENT has no DTSTART")
    start = _utc(event.start, event["DTSTART"].params.get("TZID"))
    end_property = event.get("DTEND")
    end = _utc(event.end, end_property.params.get("TZID") if end_property is not None else None)
    sequence = int(event.get("SEQUENCE", 0))
    method = _text(calendar.get("METHOD"), 32).upper()
    return CalendarInvite(
        method=method or None,
        uid=uid,
        sequence=max(0, min(sequence, 2**31 - 1)),
        start=start,
        end=end,
        summary=_text(event.get("SUMMARY"), MAX_SUMMARY_CHARS),
        organizer=_person(event.get("ORGANIZER")),
        attendees=[
            {**person, "status": _text(prop.params.get("PARTSTAT"), 32).lower() or PartStat.NEEDS_ACTION}
            for prop in _values(event, "ATTENDEE")[:MAX_ATTENDEES]
            if (person := _person(prop)) is not None
        ],
    )


def _utc(value: date | datetime, tzid: str | None) -> datetime:
    """An instant in UTC. Without a zone of its own (an all-day date, a floating time) the invite's
    time is read as UTC: the mail says nothing better."""
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(), tzinfo=UTC)
    elif value.tzinfo is None:
        if tzid:
            # icalendar leaves a time with an unknown TZID naive, which would pass for floating.
            raise InvalidInvite(f"unknown time zone {storable_text(str(tzid), 64)!r}")
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _text(value: Any, max_chars: int) -> str:
    return "" if value is None else storable_text(str(value), max_chars).strip()


def _values(component: icalendar.Component, name: str) -> list[Any]:
    value = component.get(name)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _person(prop: Any) -> dict[str, str] | None:
    """{"email", "name"} of an ORGANIZER or ATTENDEE (a `mailto:` address), None without an address."""
    if prop is None:
        return None
    address = _text(prop, MAX_ADDRESS_CHARS)
    if address.lower().startswith("mailto:"):
        address = address[len("mailto:") :]
    address = address.strip().lower()
    if not address:
        return None
    params = getattr(prop, "params", {})
    return {"email": address, "name": _text(params.get("CN"), MAX_ADDRESS_CHARS)}


def calendar_event(invite: CalendarInvite, *, linked: str | None, flag: str | None) -> dict[str, Any]:
    """What a message's `calendar_event` holds (the API's CalendarEventOutput)."""
    return {
        "method": invite.method,
        "uid": invite.uid,
        "sequence": invite.sequence,
        "start_time": isoformat_z(invite.start) if invite.start else None,
        "end_time": isoformat_z(invite.end) if invite.end else None,
        "summary": invite.summary,
        "organizer": invite.organizer,
        "attendees": invite.attendees,
        "linked": linked,
        "flag": str(flag) if flag else None,
        "problem": invite.problem or None,
    }


# --- Receiving -------------------------------------------------------------------------------------------


def sender_authenticated(*, raw: InboundRaw, sender: str, auth_results: dict[str, str]) -> bool:
    """Whether the mail's From address (`sender`) is known to be its sender's, not only claimed (see the
    module docstring). SPF alone does not count: it vouches for the envelope sender, not for From."""
    if raw.local_delivery:
        return True
    if not sender:
        return False
    if auth_results.get("dmarc") == "pass":
        return True
    domain = sender.rpartition("@")[2].lower()
    # DKIM proves who signed, which may be any domain: only a signature of the From address's own domain
    # (or of a domain it belongs to, as DMARC's relaxed alignment allows) says anything about From.
    return any(domain == signer or domain.endswith(f".{signer}") for signer in _dkim_signers(bytes(raw.raw)))


_DKIM_PASS = re.compile(r"^\s*dkim\s*=\s*pass\b(.*)$", re.IGNORECASE)
_SIGNER = re.compile(r"\bheader\.(?:d\s*=\s*|i\s*=\s*[^\s;@]*@)([a-z0-9.-]+)", re.IGNORECASE)


def _dkim_signers(raw: bytes) -> set[str]:
    """The domains (header.d, or header.i's) whose DKIM signature a trusted receiving server found valid,
    from its Authentication-Results (RFC 8601); the same trust rule as inboxes.parsing."""
    trusted = frozenset(settings.INBOUND_TRUSTED_AUTHSERV_IDS)
    try:
        headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(raw)
        values = [" ".join(str(v).split()) for v in headers.get_all("Authentication-Results") or []]
    except Exception:  # a stranger's bytes: unreadable headers vouch for nothing
        return set()
    signers: set[str] = set()
    for value in values:
        authserv_id, _, results = value.partition(";")
        names = authserv_id.split()
        if names and names[0].lower() in trusted:
            for result in results.split(";"):
                passed = _DKIM_PASS.match(result)
                if passed:
                    signers.update(d.lower().strip(".") for d in _SIGNER.findall(passed.group(1)))
    return signers - {""}


def invite_received(
    *, agent: Agent, message: Message, invite: CalendarInvite | None, sender_verified: bool
) -> dict[str, Any] | None:
    """Link a delivered message's invite (inside the delivery's transaction) and store the result as its
    `calendar_event`; returns it (None: the message has no calendar data). `sender_verified`: whether
    the mail's From is authenticated (sender_authenticated)."""
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
    if (invite.start_time, invite.end_time, invite.summary) != (head.start_time, head.end_time, summary):
        # The booking changed since the attendees were last told: a new version of the invite.
        invite.sequence += 1
        invite.start_time, invite.end_time, invite.summary = head.start_time, head.end_time, summary
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
    return InviteDraft(invite=invite, event=_outgoing_event(invite, method="REQUEST"))


def invite_sent(draft: InviteDraft, message: Message) -> None:
    """Remember the message that carried the invite: a later CANCEL answers it, in its thread."""
    BookingInvite.objects.filter(pk=draft.invite.pk).update(last_message=message)


def _outgoing_event(invite: BookingInvite, *, method: str, sequence: int | None = None) -> dict[str, Any]:
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


def invite_ics(event: dict[str, Any], *, stamp: datetime) -> str:
    """The .ics for an outgoing message's `calendar_event` (METHOD REQUEST or CANCEL), CRLF line endings."""
    method = event["method"]
    vevent = icalendar.Event()
    vevent.add("UID", event["uid"])
    vevent.add("SEQUENCE", event["sequence"])
    vevent.add("DTSTAMP", stamp.astimezone(UTC))
    vevent.add("DTSTART", datetime.fromisoformat(event["start_time"]).astimezone(UTC))
    vevent.add("DTEND", datetime.fromisoformat(event["end_time"]).astimezone(UTC))
    vevent.add("SUMMARY", event["summary"])
    vevent.add("STATUS", "CANCELLED" if method == "CANCEL" else "CONFIRMED")
    vevent.add("TRANSP", "OPAQUE")
    organizer = event["organizer"]
    vevent.add("ORGANIZER", _address(organizer, {}))
    for attendee in event["attendees"]:
        params = {"ROLE": "REQ-PARTICIPANT", "PARTSTAT": "NEEDS-ACTION"}
        if method == "REQUEST":
            params["RSVP"] = "TRUE"  # asks the attendee's client for a REPLY, which links back by UID
        vevent.add("ATTENDEE", _address(attendee, params))
    calendar = icalendar.Calendar()
    calendar.add("PRODID", PRODID)
    calendar.add("VERSION", "2.0")
    calendar.add("METHOD", method)
    calendar.add_component(vevent)
    return bytes(calendar.to_ical()).decode()


def _address(person: dict[str, str], params: dict[str, str]) -> icalendar.vCalAddress:
    address = icalendar.vCalAddress(f"mailto:{person['email']}")
    if person.get("name"):
        address.params["CN"] = person["name"]
    for name, value in params.items():
        address.params[name] = value
    return address


def invite_attach(outgoing: EmailMultiAlternatives, message: Message) -> None:
    """Add an outgoing message's invite: inline as `text/calendar; method=…` (what calendar clients act
    on) and as an `invite.ics` attachment (what the rest show)."""
    event = message.calendar_event
    assert event is not None
    ics = invite_ics(event, stamp=message.received_at)
    outgoing.attach_alternative(ics, f"text/calendar; method={event['method']}")
    outgoing.attach("invite.ics", ics, "application/ics")


# --- The CANCEL sweep ------------------------------------------------------------------------------------


def invites_cancel_ended() -> int:
    """Periodic: send the CANCEL for every invite whose booking is no longer committed (cancelled,
    bumped, gone), in batches by id. Returns how many were sent.

    An agent over a send quota holds up only its own CANCELs: at its first refusal all of its due ones
    wait (`next_try_at`) and the rest of the run passes them by, so every other agent's still go out."""
    committed = Reservation.objects.filter(
        booking_id=OuterRef("booking_id"), status=ReservationStatus.COMMITTED
    )
    due = (
        BookingInvite.objects.filter(cancelled_at__isnull=True)
        .filter(Q(next_try_at__isnull=True) | Q(next_try_at__lte=Now()))
        .filter(~Exists(committed))
    )
    sent = 0
    refused_agents: set[int] = set()
    after = 0
    while batch := list(due.filter(pk__gt=after).order_by("pk").values_list("pk", "agent_id")[:SWEEP_BATCH]):
        after = batch[-1][0]
        for invite_pk, agent_id in batch:
            if agent_id in refused_agents:
                continue
            try:
                sent += invite_cancel(invite_pk)
            except QuotaExceeded as exc:
                refused_agents.add(agent_id)
                # The quota's own answer when it has one, but no later than an hour: a limit of 0 names no
                # time, and a person may raise a limit at any moment.
                wait = min(exc.retry_after_seconds or QUOTA_RETRY_SECONDS, QUOTA_RETRY_SECONDS)
                waiting = due.filter(agent_id=agent_id).update(next_try_at=Now() + timedelta(seconds=wait))
                logger.info(
                    "%s CANCEL(s) of agent %s wait %ss: over its %s quota", waiting, agent_id, wait, exc.quota
                )
    return sent


def invite_cancel(invite_pk: int) -> bool:
    """Queue the CANCEL for one invite whose booking ended, and mark the invite cancelled in the same
    transaction, under its row lock: a second sweep running at the same time skips the locked row, or
    (once this commits) finds it cancelled. Returns whether this call sent it."""
    from inboxes import sending  # inboxes.sending imports this module

    with transaction.atomic(durable=True):
        invite = (
            BookingInvite.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("agent__workspace", "last_message__thread")
            .filter(pk=invite_pk, cancelled_at__isnull=True)
            .first()
        )
        if invite is None:
            return False  # another sweep has it, or sent it already
        if Reservation.objects.filter(
            booking_id=invite.booking_id, status=ReservationStatus.COMMITTED
        ).exists():
            return False
        agent = invite.agent
        carriers = Message.objects.filter(agent=agent, invite_booking_id=invite.booking_id)
        if not carriers.exclude(status=MessageStatus.DISCARDED).exists():
            # Every message with the invite was discarded in review: nobody was invited, nobody to tell.
            BookingInvite.objects.filter(pk=invite.pk).update(cancelled_at=Now())
            return False
        sequence = invite.sequence + 1
        parent = invite.last_message
        # The summary is the booking's title: any text, and a header must be one line.
        subject = one_line(f"Cancelled: {invite.summary}")
        if parent is not None:
            thread = parent.thread
        else:  # the message that carried the invite is gone: the CANCEL starts a thread of its own
            thread = Thread.objects.create(
                agent=agent, subject=subject, counterpart=invite.attendees[0]["email"]
            )
        # The path every outbound message takes: the agent's quotas and review-first apply to it too.
        message = sending._queue(
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
            calendar_event=_outgoing_event(invite, method="CANCEL", sequence=sequence),
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
    sending._review_if_asked(message, Actor(workspace=agent.workspace, agent=agent))
    return True
