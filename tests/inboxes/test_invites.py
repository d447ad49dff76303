"""Calendar invites in agents' mail: .ics invites received over real SMTP (or stored as the listener
stores them) link to the agent's holds and bookings; attendees' replies update the booking only when the
attendee is the sender and the sender is authenticated (a trusted receiving server's DMARC or aligned
DKIM verdict, or our own local delivery); a CANCEL is the organizer's only when it comes from the
organizer, authenticated, and never for the agent's own invite; invites sent with a booking reach a real
local relay as METHOD:REQUEST, and the CANCEL for a booking that ended goes out once, however many sweeps
race for it, and an agent over its send quota never holds up another agent's."""

from __future__ import annotations

import email.message
import smtplib
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import pytest
from django.db.models import F
from django.db.models.functions import Now

from audit.models import AuditRecord
from bookings.models import Reservation
from inboxes import invite_cancels
from inboxes.delivery import message_deliver
from inboxes.invite_cancels import invite_cancel, invites_cancel_ended
from inboxes.models import BookingInvite, InboundRaw, InviteResponse, Message, MessageStatus
from inboxes.services import inbound_parse
from tests.bookings.helpers import commit, created, hold, problem
from tests.helpers import backends_blocked_by_this_transaction, slot
from tests.inboxes import test_sending
from tests.inboxes.helpers import address_of, deliver_raw, mail
from tests.webhooks.helpers import wait_until
from webhooks.models import OutboxEvent
from workspaces.models import Agent

ANA = "ana@example.com"
# What the installation's own MTA writes above a message whose From it checked (RFC 8601); it is believed
# only from the authserv-ids in INBOUND_TRUSTED_AUTHSERV_IDS (the `trusted_mx` fixture).
MX = "mx.acme.test"
AUTHENTICATED = {
    "Authentication_Results": f"{MX}; spf=pass smtp.mailfrom=example.com; dmarc=pass header.from=example.com"
}


@pytest.fixture
def trusted_mx(settings: Any) -> None:
    settings.INBOUND_TRUSTED_AUTHSERV_IDS = [MX]


# The relay: a real local SMTP server collecting what it is given (as in test_sending).
sink = test_sending.sink


def ics(
    method: str,
    *,
    uid: str,
    start: datetime,
    end: datetime,
    organizer: str = ANA,
    attendees: tuple[tuple[str, str], ...] = (),
    sequence: int = 0,
    summary: str = "Intro call",
) -> bytes:
    """An iCalendar object as a calendar client would send it."""
    event = icalendar.Event()
    event.add("UID", uid)
    event.add("SEQUENCE", sequence)
    event.add("DTSTAMP", datetime.now(UTC))
    event.add("DTSTART", start)
    event.add("DTEND", end)
    event.add("SUMMARY", summary)
    event.add("ORGANIZER", icalendar.vCalAddress(f"mailto:{organizer}"))
    for address, partstat in attendees:
        attendee = icalendar.vCalAddress(f"mailto:{address}")
        attendee.params["PARTSTAT"] = partstat
        event.add("ATTENDEE", attendee)
    calendar = icalendar.Calendar()
    calendar.add("PRODID", "-//Example//Client//EN")
    calendar.add("VERSION", "2.0")
    calendar.add("METHOD", method)
    calendar.add_component(event)
    return bytes(calendar.to_ical())


def invite_mail(to: str, data: bytes, method: str, **kwargs: Any) -> email.message.EmailMessage:
    """A mail carrying the invite the way Gmail does: inline text/calendar plus an invite.ics."""
    message = mail(to, **kwargs)
    message.add_alternative(data.decode(), subtype="calendar", params={"method": method})
    message.add_attachment(data, maintype="application", subtype="ics", filename="invite.ics")
    return message


def span_of(booking: dict[str, Any], zone: str = "UTC") -> tuple[datetime, datetime]:
    start = datetime.fromisoformat(booking["start_time"]).astimezone(ZoneInfo(zone))
    end = datetime.fromisoformat(booking["end_time"]).astimezone(ZoneInfo(zone))
    return start, end


def event_of(message: Message) -> dict[str, Any]:
    assert message.calendar_event is not None
    return message.calendar_event


def shown(persona, message: Message) -> dict[str, Any]:
    response = persona.client.get(f"/inbox/messages/{message.public_id}")
    assert response.status_code == 200, response.text
    return response.json()


def send_invite(persona, booking_id: str, to: list[str], *, subject: str = "Handover", text: str = "."):
    """POST /inbox/send with the booking's invite attached (the response, as the API gave it)."""
    return persona.client.post(
        "/inbox/send",
        json={"to": to, "subject": subject, "text": text, "invite": {"booking_id": booking_id}},
    )


def booking_with_invite(
    persona, calendar, *, attendees: list[Any], title: str = "Intro call", hours_ahead: int = 26
) -> tuple[dict[str, Any], Message]:
    """A committed booking and the message that sent its invite to Ana (queued, not delivered)."""
    booking = created(commit(persona, calendar["id"], slot(hours_ahead), title=title, attendees=attendees))
    response = send_invite(persona, booking["id"], [ANA], subject="Intro", text="Invite attached.")
    assert response.status_code == 202, response.text
    return booking, Message.objects.get(public_id=response.json()["id"])


def test_an_invite_sent_over_smtp_for_a_held_span_links_to_the_hold(sdr, calendar, smtp_port):
    held = created(hold(sdr, calendar["id"], slot(30, minutes=60), ttl_seconds=600))
    # The organizer's client writes Berlin time: the span still matches the hold's UTC span.
    start, end = span_of(held, "Europe/Berlin")
    data = ics(
        "REQUEST",
        uid="evt-1@example.com",
        start=start,
        end=end,
        attendees=((address_of(sdr), "NEEDS-ACTION"),),
    )
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
        client.send_message(invite_mail(address_of(sdr), data, "REQUEST"), from_addr=ANA)
    (message,) = inbound_parse(InboundRaw.objects.latest("pk").pk)

    event = shown(sdr, message)["calendar_event"]
    assert event["method"] == "REQUEST"
    assert event["uid"] == "evt-1@example.com"
    assert event["linked"] == held["id"]
    assert event["flag"] is None
    assert (event["start_time"], event["end_time"]) == (held["start_time"], held["end_time"])
    assert event["organizer"] == {"email": ANA, "name": ""}
    assert event["attendees"] == [{"email": address_of(sdr), "name": "", "status": "needs-action"}]
    announced = OutboxEvent.objects.get(event_type="message.received").payload["message"]
    assert announced["calendar_event"]["linked"] == held["id"]

    # The same invite an hour later matches nothing of the agent's.
    later = ics("REQUEST", uid="evt-2@example.com", start=end, end=end.replace(hour=(end.hour + 1) % 24))
    (other,) = deliver_raw(invite_mail(address_of(sdr), later, "REQUEST").as_bytes(), [address_of(sdr)])
    assert event_of(other)["linked"] is None


def test_an_attendees_reply_updates_the_booking(sdr, calendar, trusted_mx):
    booking, sent = booking_with_invite(
        sdr, calendar, attendees=[{"email": "Ana@Example.com", "name": "Ana"}, "bo@example.org"]
    )
    start, end = span_of(booking)
    version = Reservation.objects.get(booking_id=booking["id"]).version
    reply = ics(
        "REPLY",
        uid=event_of(sent)["uid"],
        start=start,
        end=end,
        organizer=address_of(sdr),
        attendees=((ANA, "ACCEPTED"),),
    )
    (message,) = deliver_raw(
        invite_mail(
            address_of(sdr), reply, "REPLY", subject="Accepted: Intro call", **AUTHENTICATED
        ).as_bytes(),
        [address_of(sdr)],
    )

    event = shown(sdr, message)["calendar_event"]
    assert (event["method"], event["linked"], event["flag"]) == ("REPLY", booking["id"], None)
    attendees = sdr.client.get(f"/bookings/{booking['id']}").json()["attendees"]
    assert attendees == [
        {"email": "Ana@Example.com", "name": "Ana", "response": "accepted"},
        "bo@example.org",
    ]
    assert Reservation.objects.get(booking_id=booking["id"]).version == version + 1  # a version-checked write
    (response,) = InviteResponse.objects.all()
    assert (response.email, response.partstat, response.applied) == (ANA, "accepted", True)

    (audit,) = AuditRecord.objects.filter(event_type="calendar.booking.attendee_responded")
    assert audit.reservation_public_id == booking["id"] and audit.details["response"] == "accepted"
    (announced,) = OutboxEvent.objects.filter(event_type="booking.attendee_responded")
    assert announced.payload["booking"]["id"] == booking["id"]
    assert announced.payload["attendee"] == {"email": ANA, "name": "", "response": "accepted"}
    assert announced.payload["message_id"] == message.public_id


@pytest.mark.concurrency
def test_an_answer_never_overwrites_a_concurrent_change_to_the_attendees(sdr, calendar, trusted_mx):
    """Another writer holds the booking's row (and has changed its attendees) while the reply is applied:
    the reply's version-checked update waits, finds the row moved on, and merges into the new list."""
    from django.db import connection as db
    from django.db import transaction

    booking, sent = booking_with_invite(sdr, calendar, attendees=[{"email": ANA}])
    start, end = span_of(booking)
    reply = ics("REPLY", uid=event_of(sent)["uid"], start=start, end=end, attendees=((ANA, "TENTATIVE"),))
    raw = invite_mail(address_of(sdr), reply, "REPLY", **AUTHENTICATED).as_bytes()

    def receive() -> None:
        try:
            deliver_raw(raw, [address_of(sdr)])
        finally:
            db.close()

    replier = threading.Thread(target=receive)
    with transaction.atomic():
        Reservation.objects.filter(booking_id=booking["id"]).update(
            attendees=[{"email": ANA}, {"email": "cy@example.org"}], version=F("version") + 1
        )
        replier.start()
        wait_until(lambda: backends_blocked_by_this_transaction() > 0)
    replier.join()

    attendees = sdr.client.get(f"/bookings/{booking['id']}").json()["attendees"]
    assert attendees == [{"email": ANA, "response": "tentative"}, {"email": "cy@example.org"}]


def test_a_reply_from_someone_else_is_recorded_but_not_applied(sdr, calendar):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[{"email": ANA}])
    start, end = span_of(booking)
    forged = ics("REPLY", uid=event_of(sent)["uid"], start=start, end=end, attendees=((ANA, "DECLINED"),))
    (message,) = deliver_raw(
        invite_mail(address_of(sdr), forged, "REPLY", sender="Eve <eve@example.net>").as_bytes(),
        [address_of(sdr)],
        sender="eve@example.net",
    )

    event = shown(sdr, message)["calendar_event"]
    assert (event["linked"], event["flag"]) == (booking["id"], "sender_not_attendee")
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["attendees"] == [{"email": ANA}]
    (response,) = InviteResponse.objects.all()
    assert (response.partstat, response.applied, response.reason) == (
        "declined",
        False,
        "sender_not_attendee",
    )
    (audit,) = AuditRecord.objects.filter(event_type="calendar.booking.attendee_response.rejected")
    assert audit.failure_reason == "sender_not_attendee" and audit.details["sender"] == "eve@example.net"
    assert not OutboxEvent.objects.filter(event_type="booking.attendee_responded").exists()


@pytest.mark.parametrize(
    "results",
    [
        pytest.param(None, id="no verdict"),
        pytest.param(f"{MX}; dmarc=fail header.from=example.com", id="dmarc fail"),
        pytest.param("mx.evil.test; dmarc=pass header.from=example.com", id="verdict of an untrusted server"),
        pytest.param(f"{MX}; spf=pass smtp.mailfrom=example.com", id="spf alone"),
        pytest.param(f"{MX}; dkim=pass header.d=evil.test; dmarc=none", id="dkim of another domain"),
        pytest.param(f"{MX}; dkim=pass header.d=notexample.com", id="dkim of a lookalike domain"),
        pytest.param(f"{MX}; dkim=fail header.d=example.com", id="dkim fail"),
    ],
)
def test_a_forged_reply_is_recorded_but_never_applied(sdr, calendar, trusted_mx, results):
    """From: Ana is what anyone can write: without a trusted server's word for it, her "declined"
    changes nothing."""
    booking, sent = booking_with_invite(sdr, calendar, attendees=[{"email": ANA}])
    start, end = span_of(booking)
    forged = ics("REPLY", uid=event_of(sent)["uid"], start=start, end=end, attendees=((ANA, "DECLINED"),))
    headers = {"Authentication_Results": results} if results else {}
    (message,) = deliver_raw(
        invite_mail(address_of(sdr), forged, "REPLY", **headers).as_bytes(), [address_of(sdr)]
    )

    event = shown(sdr, message)["calendar_event"]
    assert (event["linked"], event["flag"]) == (booking["id"], "sender_unverified")
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["attendees"] == [{"email": ANA}]
    (response,) = InviteResponse.objects.all()
    assert (response.partstat, response.applied, response.reason) == ("declined", False, "sender_unverified")
    (audit,) = AuditRecord.objects.filter(event_type="calendar.booking.attendee_response.rejected")
    assert audit.failure_reason == "sender_unverified"
    assert not OutboxEvent.objects.filter(event_type="booking.attendee_responded").exists()


@pytest.mark.parametrize(
    "results",
    [
        pytest.param(f"{MX}; dkim=pass header.d=example.com header.s=s1", id="dkim of the from domain"),
        pytest.param(f"{MX}; dkim=pass (2048-bit key) header.i=@example.com", id="dkim identity"),
        pytest.param(
            f"{MX}; dkim=fail header.d=x.test; dkim=pass header.d=Example.COM", id="second signature"
        ),
    ],
)
def test_a_reply_signed_by_the_senders_own_domain_is_applied(sdr, calendar, trusted_mx, results):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[{"email": ANA}])
    start, end = span_of(booking)
    reply = ics("REPLY", uid=event_of(sent)["uid"], start=start, end=end, attendees=((ANA, "DECLINED"),))
    (message,) = deliver_raw(
        invite_mail(address_of(sdr), reply, "REPLY", Authentication_Results=results).as_bytes(),
        [address_of(sdr)],
    )

    assert event_of(message)["flag"] is None
    attendees = sdr.client.get(f"/bookings/{booking['id']}").json()["attendees"]
    assert attendees == [{"email": ANA, "response": "declined"}]


def test_an_organizers_cancel_is_flagged_and_the_booking_stays(sdr, calendar, trusted_mx):
    booking = created(commit(sdr, calendar["id"], slot(28)))
    start, end = span_of(booking)
    cancel = ics("CANCEL", uid="evt-9@example.com", start=start, end=end, sequence=1)
    (message,) = deliver_raw(
        invite_mail(address_of(sdr), cancel, "CANCEL", **AUTHENTICATED).as_bytes(), [address_of(sdr)]
    )

    event = shown(sdr, message)["calendar_event"]
    assert (event["method"], event["linked"], event["flag"]) == (
        "CANCEL",
        booking["id"],
        "cancelled_by_organizer",
    )
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["status"] == "committed"
    (audit,) = AuditRecord.objects.filter(event_type="inbox.invite.cancelled_by_organizer")
    assert audit.reservation_public_id == booking["id"] and audit.details["message"] == message.public_id


@pytest.mark.parametrize(
    ("case", "flag"),
    [
        # Every attendee of the agent's invite has its UID, and may write itself in as ORGANIZER.
        ("an attendee of the agent's own invite", "not_organizer"),
        ("someone other than the organizer", "not_organizer"),
        ("the organizer, unauthenticated", "sender_unverified"),
    ],
)
def test_a_cancel_not_from_its_authenticated_organizer_is_not_the_organizers(
    sdr, calendar, trusted_mx, case, flag
):
    if case == "an attendee of the agent's own invite":
        booking, sent = booking_with_invite(sdr, calendar, attendees=[{"email": ANA}])
        uid, organizer, headers = event_of(sent)["uid"], ANA, AUTHENTICATED
    else:
        booking = created(commit(sdr, calendar["id"], slot(28)))
        uid = "evt-9@example.com"
        organizer, headers = ("bo@example.org", AUTHENTICATED) if case.startswith("someone") else (ANA, {})
    start, end = span_of(booking)
    cancel = ics("CANCEL", uid=uid, start=start, end=end, organizer=organizer, sequence=1)
    (message,) = deliver_raw(
        invite_mail(address_of(sdr), cancel, "CANCEL", **headers).as_bytes(), [address_of(sdr)]
    )

    event = shown(sdr, message)["calendar_event"]
    assert (event["method"], event["linked"], event["flag"]) == ("CANCEL", booking["id"], flag)
    assert sdr.client.get(f"/bookings/{booking['id']}").json()["status"] == "committed"
    assert not AuditRecord.objects.filter(event_type="inbox.invite.cancelled_by_organizer").exists()


def test_a_cancel_from_another_agent_delivered_here_is_the_organizers_and_the_same_mail_from_outside_is_not(
    sdr, exec_assistant, calendar
):
    """No trusted server is configured: only our own local delivery vouches for the sender, and nothing
    in the bytes can claim it."""
    booking = created(commit(sdr, calendar["id"], slot(34), title="Handover"))
    other_calendar = exec_assistant.client.post("/calendars", json={"name": "Assistant"}).json()
    held = created(hold(exec_assistant, other_calendar["id"], slot(34), ttl_seconds=600))
    response = send_invite(sdr, booking["id"], [address_of(exec_assistant)])
    assert message_deliver(Message.objects.get(public_id=response.json()["id"]).pk) == MessageStatus.SENT
    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200
    assert invites_cancel_ended() == 1
    assert message_deliver(Message.objects.get(calendar_event__method="CANCEL").pk) == MessageStatus.SENT

    received = Message.objects.get(agent=exec_assistant.agent, calendar_event__method="CANCEL")
    assert received.raw is not None and received.raw.local_delivery
    assert (event_of(received)["linked"], event_of(received)["flag"]) == (
        held["id"],
        "cancelled_by_organizer",
    )

    (copy,) = deliver_raw(bytes(received.raw.raw), [address_of(exec_assistant)], sender=address_of(sdr))
    assert (event_of(copy)["linked"], event_of(copy)["flag"]) == (held["id"], "sender_unverified")
    assert AuditRecord.objects.filter(event_type="inbox.invite.cancelled_by_organizer").count() == 1


def test_a_malformed_invite_is_delivered_and_flagged(sdr):
    lines = ["BEGIN:VCALENDAR", "METHOD:REQUEST", "BEGIN:VEVENT", "UID:x", "DTSTART:2026XX", "END:VEVENT"]
    broken = "\r\n".join([*lines, "END:VCALENDAR", ""]).encode()
    (message,) = deliver_raw(invite_mail(address_of(sdr), broken, "REQUEST").as_bytes(), [address_of(sdr)])

    body = shown(sdr, message)
    assert body["text"].strip() == "Could we meet on Tuesday?"
    assert body["calendar_event"]["flag"] == "malformed"
    assert "DTSTART" in body["calendar_event"]["problem"]
    assert body["calendar_event"]["linked"] is None
    assert "unreadable calendar invite" in InboundRaw.objects.get().problem


def test_an_invite_goes_to_the_relay_as_a_request_with_a_stable_uid(sdr, calendar, sink):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[{"email": ANA, "name": "Ana Lopez"}])
    assert message_deliver(sent.pk) == MessageStatus.SENT

    ((envelope, delivered),) = sink.received
    assert envelope == [ANA]
    inline = [p for p in delivered.walk() if p.get_content_type() == "text/calendar"]
    attached = [p for p in delivered.walk() if p.get_filename() == "invite.ics"]
    assert len(inline) == 1 and len(attached) == 1
    assert inline[0].get_param("method") == "REQUEST"
    calendar_data = icalendar.Calendar.from_ical(inline[0].get_content())
    assert bytes(attached[0].get_content()) == calendar_data.to_ical()
    assert str(calendar_data["METHOD"]) == "REQUEST"
    (event,) = calendar_data.events
    assert str(event["UID"]) == f"{booking['id']}@acme.agentcal.localhost"
    assert event.sequence == 0
    assert str(event["SUMMARY"]) == "Intro call"
    assert str(event["ORGANIZER"]) == f"mailto:{address_of(sdr)}"
    attendee = event["ATTENDEE"]
    assert str(attendee) == f"mailto:{ANA}"
    assert (attendee.params["RSVP"], attendee.params["CN"]) == ("TRUE", "Ana Lopez")
    assert (event.start, event.end) == span_of(booking)

    listed = shown(sdr, sent)
    assert listed["invite_booking_id"] == booking["id"]
    assert listed["calendar_event"]["uid"] == str(event["UID"])

    # Sent again (the booking unchanged): the same UID and SEQUENCE, one invite row.
    again = send_invite(sdr, booking["id"], ["bo@example.org"], subject="Intro")
    second = Message.objects.get(public_id=again.json()["id"])
    assert (event_of(second)["uid"], event_of(second)["sequence"]) == (str(event["UID"]), 0)
    assert [a["email"] for a in event_of(second)["attendees"]] == [ANA, "bo@example.org"]
    assert BookingInvite.objects.count() == 1


def test_an_invite_to_another_agent_links_to_its_hold(sdr, exec_assistant, calendar):
    """Delivered locally (no relay): the .ics travels through the same build and parse."""
    booking = created(commit(sdr, calendar["id"], slot(34), title="Handover"))
    theirs = created(hold(exec_assistant, calendar["id"], slot(34, offset_minutes=30), ttl_seconds=600))
    # The assistant's hold on another calendar has the booking's span exactly.
    other_calendar = exec_assistant.client.post("/calendars", json={"name": "Assistant"}).json()
    held = created(hold(exec_assistant, other_calendar["id"], slot(34), ttl_seconds=600))
    response = send_invite(sdr, booking["id"], [address_of(exec_assistant)])
    assert message_deliver(Message.objects.get(public_id=response.json()["id"]).pk) == MessageStatus.SENT
    (received,) = Message.objects.filter(agent=exec_assistant.agent)
    assert event_of(received)["method"] == "REQUEST"
    assert event_of(received)["linked"] == held["id"] != theirs["id"]


def test_sending_an_invite_for_no_live_booking_of_ones_own_is_refused(sdr, exec_assistant, calendar):
    def send(booking_id: str):
        return send_invite(sdr, booking_id, [ANA], subject="x", text="x")

    problem(send("bk_nothing"), 404, "not_found")
    theirs = created(commit(exec_assistant, calendar["id"], slot(40)))
    problem(send(theirs["id"]), 404, "not_found")
    mine = created(commit(sdr, calendar["id"], slot(42)))
    assert sdr.client.delete(f"/bookings/{mine['id']}").status_code == 200
    assert problem(send(mine["id"]), 409, "booking_not_live")["booking_status"] == "cancelled"
    assert (
        sdr.client.post(
            "/inbox/send", json={"to": [ANA], "subject": "x", "text": "x", "invite": {}}
        ).status_code
        == 400
    )
    assert not Message.objects.exists() and not BookingInvite.objects.exists()


@pytest.mark.concurrency
def test_a_cancelled_booking_sends_its_cancel_once_even_with_two_sweeps_racing(sdr, calendar, sink):
    from django.db import connection as db

    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    assert message_deliver(sent.pk) == MessageStatus.SENT
    assert invites_cancel_ended() == 0  # still committed: nothing to cancel
    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200

    invite_pk = BookingInvite.objects.get().pk
    runs = [invites_cancel_ended, invites_cancel_ended, lambda: invite_cancel(invite_pk)] * 2
    start = threading.Barrier(len(runs))
    results: list[Any] = []

    def sweep(run: Any) -> None:
        try:
            db.ensure_connection()  # connected before the start, so that they really race
            start.wait()
            results.append(run())
        finally:
            db.close()

    racers = [threading.Thread(target=sweep, args=(run,)) for run in runs]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert sum(int(r) for r in results) == 1
    assert invites_cancel_ended() == 0

    (cancel,) = Message.objects.filter(calendar_event__method="CANCEL")
    assert cancel.thread_id == sent.thread_id and cancel.in_reply_to == sent.message_id
    assert message_deliver(cancel.pk) == MessageStatus.SENT
    (_, (envelope, delivered)) = sink.received
    assert envelope == [ANA]
    (part,) = [p for p in delivered.walk() if p.get_content_type() == "text/calendar"]
    assert part.get_param("method") == "CANCEL"
    data = icalendar.Calendar.from_ical(part.get_content())
    (event,) = data.events
    assert str(data["METHOD"]) == "CANCEL" and str(event["STATUS"]) == "CANCELLED"
    assert str(event["UID"]) == event_of(sent)["uid"]
    assert event.sequence == 1
    invite = BookingInvite.objects.get()
    assert invite.cancelled_at is not None and invite.sequence == 1
    assert AuditRecord.objects.filter(event_type="inbox.invite.cancelled").count() == 1


def put_in_the_past(booking_id: str) -> None:
    """The booking, and what its invite told, three days earlier: a meeting that is over."""
    earlier = {
        "start_time": F("start_time") - timedelta(days=3),
        "end_time": F("end_time") - timedelta(days=3),
    }
    Reservation.objects.filter(booking_id=booking_id).update(**earlier)
    BookingInvite.objects.filter(booking_id=booking_id).update(**earlier)


def test_no_cancel_goes_out_for_a_meeting_that_was_over_when_its_booking_was_cancelled(sdr, calendar, sink):
    """The attendees' calendars show it in the past: a CANCEL now would tell them nothing. The invite is
    left open, so the sweeps (which read only meetings not yet over) never look at it again."""
    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    assert message_deliver(sent.pk) == MessageStatus.SENT
    put_in_the_past(booking["id"])
    Reservation.objects.filter(booking_id=booking["id"]).update(status="cancelled", ended_at=Now())

    assert invites_cancel_ended() == 0
    assert not Message.objects.filter(calendar_event__method="CANCEL").exists()
    assert BookingInvite.objects.get().cancelled_at is None


def test_no_cancel_goes_out_for_an_invite_that_review_discarded(sdr, calendar):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    # What a person's denial in review leaves (inboxes.review): the draft discarded, never sent.
    Message.objects.filter(pk=sent.pk).update(status=MessageStatus.DISCARDED)
    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200

    assert invites_cancel_ended() == 0
    assert BookingInvite.objects.get().cancelled_at is not None
    assert not Message.objects.filter(calendar_event__method="CANCEL").exists()


def test_an_agent_over_its_send_quota_holds_up_only_its_own_cancels(
    sdr, exec_assistant, calendar, monkeypatch
):
    # Small batches: the quota-refused agent's invites come first by id and would fill every one.
    monkeypatch.setattr(invite_cancels, "SWEEP_BATCH", 2)
    refused = [booking_with_invite(sdr, calendar, attendees=[], hours_ahead=h)[0] for h in (26, 27, 28)]
    theirs, _ = booking_with_invite(exec_assistant, calendar, attendees=[], hours_ahead=29)
    Agent.objects.filter(pk=sdr.agent.pk).update(inbox_burst_limit=0)  # sending switched off
    for booking in refused:
        assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200
    assert exec_assistant.client.delete(f"/bookings/{theirs['id']}").status_code == 200

    assert invites_cancel_ended() == 1
    (cancel,) = Message.objects.filter(calendar_event__method="CANCEL")
    assert cancel.agent_id == exec_assistant.agent.pk
    waiting = BookingInvite.objects.filter(agent=sdr.agent)
    assert all(i.cancelled_at is None and i.next_try_at is not None for i in waiting)
    pushed = sorted(i.next_try_at for i in waiting if i.next_try_at)
    assert invites_cancel_ended() == 0  # not tried again before then
    assert sorted(i.next_try_at for i in waiting if i.next_try_at) == pushed

    # The limit raised, and the wait over: they go out.
    Agent.objects.filter(pk=sdr.agent.pk).update(inbox_burst_limit=None)
    BookingInvite.objects.filter(agent=sdr.agent).update(next_try_at=Now())
    assert invites_cancel_ended() == 3
    assert not BookingInvite.objects.filter(cancelled_at__isnull=True).exists()


def test_a_cancel_for_a_title_with_line_breaks_goes_out_with_a_one_line_subject(sdr, calendar, sink):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[], title="Intro\x0bX-Evil: 1\x1ccall")
    assert message_deliver(sent.pk) == MessageStatus.SENT
    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200
    assert invites_cancel_ended() == 1
    cancel = Message.objects.get(calendar_event__method="CANCEL")
    assert cancel.subject == "Cancelled: Intro X-Evil: 1 call"
    assert message_deliver(cancel.pk) == MessageStatus.SENT

    (_, (_, delivered)) = sink.received
    assert delivered["Subject"] == "Cancelled: Intro X-Evil: 1 call"
    assert "X-Evil" not in delivered
    assert not any(line.startswith(b"X-Evil") for line in sink.raw[1].splitlines())


@pytest.mark.parametrize("invite", [None, "bk_x", {"booking_id": 5}, {"booking_id": "x", "extra": 1}])
def test_a_malformed_invite_field_is_a_problem(sdr, invite):
    response = sdr.client.post(
        "/inbox/send", json={"to": [ANA], "subject": "x", "text": "x", "invite": invite}
    )
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
