"""A moved booking's invite goes out again as an update: the booking moved over the API, each attendee
gets one message at the real local relay with the same UID, SEQUENCE + 1 and METHOD:REQUEST with the new
times, in the invite's thread, audited; however many sweeps race for it, it goes out once; a booking
moved and then cancelled still sends exactly one CANCEL after its one update."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import icalendar
import pytest

from audit.models import AuditRecord
from inboxes.delivery import message_deliver
from inboxes.invite_cancels import invites_cancel_ended
from inboxes.invite_updates import invite_update, invites_update_moved
from inboxes.models import BookingInvite, Message, MessageStatus
from tests.helpers import slot
from tests.inboxes.test_invites import ANA, booking_with_invite, event_of, put_in_the_past, sink, span_of

__all__ = ["sink"]  # the relay fixture, used by name

BO = "bo@example.org"


def moved(persona, booking_id: str, span: dict[str, str]) -> dict[str, Any]:
    response = persona.client.post(f"/bookings/{booking_id}/move", json=span)
    assert response.status_code == 200, response.text
    return response.json()


def calendar_part(delivered: Any) -> tuple[icalendar.Calendar, icalendar.Event, str]:
    (part,) = [p for p in delivered.walk() if p.get_content_type() == "text/calendar"]
    data = icalendar.Calendar.from_ical(part.get_content())
    (event,) = data.events
    return data, event, part.get_param("method")


def test_a_moved_booking_sends_each_attendee_one_update_with_the_same_uid_and_the_next_sequence(
    sdr, calendar, sink
):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[{"email": ANA, "name": "Ana Lopez"}])
    assert message_deliver(sent.pk) == MessageStatus.SENT
    assert invites_update_moved() == 0  # not moved: nothing to tell
    again = sdr.client.post(
        "/inbox/send",
        json={"to": [BO], "subject": "Intro", "text": ".", "invite": {"booking_id": booking["id"]}},
    )
    second = Message.objects.get(public_id=again.json()["id"])
    assert message_deliver(second.pk) == MessageStatus.SENT
    assert len(sink.received) == 2

    now = moved(sdr, booking["id"], slot(30))
    assert invites_update_moved() == 1
    assert invites_update_moved() == 0
    assert invites_cancel_ended() == 0  # a move is not an ending

    (update,) = Message.objects.filter(subject="Updated: Intro call")
    # In the thread of the last message that carried the invite, as its answer.
    assert update.thread_id == second.thread_id and update.in_reply_to == second.message_id
    assert event_of(update)["method"] == "REQUEST" and event_of(update)["sequence"] == 1
    assert message_deliver(update.pk) == MessageStatus.SENT
    (envelope, delivered) = sink.received[2]
    assert sorted(envelope) == sorted([ANA, BO])  # one message, each attendee once
    data, event, method = calendar_part(delivered)
    assert method == "REQUEST" and str(data["METHOD"]) == "REQUEST"
    assert str(event["UID"]) == event_of(sent)["uid"] == f"{booking['id']}@acme.agentcal.localhost"
    assert event.sequence == 1
    assert (event.start, event.end) == span_of(now) != span_of(booking)
    assert str(event["STATUS"]) == "CONFIRMED"
    text = next(p for p in delivered.walk() if p.get_content_type() == "text/plain").get_content()
    assert f"has moved to {now['start_time']} to {now['end_time']}" in text
    assert f"it was {booking['start_time']} to {booking['end_time']}" in text

    invite = BookingInvite.objects.get()
    assert invite.sequence == 1 and invite.cancelled_at is None
    assert (invite.start_time, invite.end_time) == tuple(
        datetime.fromisoformat(now[k]) for k in ("start_time", "end_time")
    )
    (audit,) = AuditRecord.objects.filter(event_type="inbox.invite.updated")
    assert audit.reservation_public_id == booking["id"]
    assert audit.details["sequence"] == 1 and audit.details["message"] == update.public_id
    assert audit.details["to"] == {"start_time": now["start_time"], "end_time": now["end_time"]}


@pytest.mark.concurrency
def test_a_move_sends_its_update_once_even_with_sweeps_racing(sdr, calendar, sink):
    from django.db import connection as db

    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    assert message_deliver(sent.pk) == MessageStatus.SENT
    moved(sdr, booking["id"], slot(30))

    invite_pk = BookingInvite.objects.get().pk
    runs = [invites_update_moved, invites_update_moved, lambda: invite_update(invite_pk)] * 2
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
    assert invites_update_moved() == 0
    assert Message.objects.filter(subject="Updated: Intro call").count() == 1
    assert BookingInvite.objects.get().sequence == 1
    assert AuditRecord.objects.filter(event_type="inbox.invite.updated").count() == 1


def test_a_moved_then_cancelled_booking_sends_one_update_then_one_cancel(sdr, calendar, sink):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    assert message_deliver(sent.pk) == MessageStatus.SENT
    moved(sdr, booking["id"], slot(30))
    assert invites_update_moved() == 1
    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200
    assert invites_update_moved() == 0  # ended: the CANCEL sweep's, not an update
    assert invites_cancel_ended() == 1
    assert invites_cancel_ended() == 0
    methods = [(event_of(m)["method"], event_of(m)["sequence"]) for m in Message.objects.order_by("pk")]
    assert methods == [("REQUEST", 0), ("REQUEST", 1), ("CANCEL", 2)]
    for message in Message.objects.exclude(pk=sent.pk).order_by("pk"):
        assert message_deliver(message.pk) == MessageStatus.SENT
    _, event, method = calendar_part(sink.received[-1][1])
    assert (method, event.sequence, str(event["UID"])) == ("CANCEL", 2, event_of(sent)["uid"])


def test_no_update_goes_out_for_an_invite_that_review_discarded(sdr, calendar):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    Message.objects.filter(pk=sent.pk).update(status=MessageStatus.DISCARDED)
    now = moved(sdr, booking["id"], slot(30))
    assert invites_update_moved() == 0
    assert invites_update_moved() == 0  # the invite now says the new time: not considered again
    invite = BookingInvite.objects.get()
    assert invite.sequence == 0 and invite.start_time == datetime.fromisoformat(now["start_time"])
    assert not AuditRecord.objects.filter(event_type="inbox.invite.updated").exists()


def test_an_invite_sent_to_someone_new_after_a_move_leaves_the_update_for_the_others(sdr, calendar):
    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    Message.objects.filter(pk=sent.pk).update(status=MessageStatus.SENT)
    now = moved(sdr, booking["id"], slot(30))
    response = sdr.client.post(
        "/inbox/send",
        json={"to": [BO], "subject": "Intro", "text": ".", "invite": {"booking_id": booking["id"]}},
    )
    assert response.status_code == 202, response.text
    to_bo = event_of(Message.objects.get(public_id=response.json()["id"]))
    assert (to_bo["start_time"], to_bo["end_time"], to_bo["sequence"]) == (
        now["start_time"],
        now["end_time"],
        1,
    )
    # Ana was told the old time only: the sweep still sends her (and everyone) the update.
    assert invites_update_moved() == 1
    (update,) = Message.objects.filter(subject="Updated: Intro call")
    assert sorted(a["address"] for a in update.to) == sorted([ANA, BO])
    assert (event_of(update)["start_time"], event_of(update)["sequence"]) == (now["start_time"], 2)
    assert invites_update_moved() == 0


def test_a_meeting_that_was_over_and_is_moved_ahead_sends_its_update(sdr, calendar, sink):
    """The sweep reads only meetings not yet over, as last told or as booked now: a meeting that took
    place (or did not) and is booked again for a time ahead is news to its attendees."""
    booking, sent = booking_with_invite(sdr, calendar, attendees=[])
    assert message_deliver(sent.pk) == MessageStatus.SENT
    put_in_the_past(booking["id"])
    assert invites_update_moved() == 0

    now = moved(sdr, booking["id"], slot(30))
    assert invites_update_moved() == 1
    (update,) = Message.objects.filter(subject="Updated: Intro call")
    assert event_of(update)["start_time"] == now["start_time"]
    assert invites_update_moved() == 0
