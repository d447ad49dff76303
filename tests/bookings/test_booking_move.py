"""Moving a booking (POST /v1/bookings/{id}/move): the same booking on a new span on all its calendars in
one transaction, or nothing changes; a bumped booking moved back within 24 h; over real HTTP."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from agentcal.clock import server_now
from agentcal.errors import NotOwner
from bookings import engine
from bookings.models import Reservation
from bookings.spans import Span
from tests.bookings.helpers import commit, created, hold, parse, problem
from tests.helpers import Persona, audit_rows, create_calendar, iso, overlapping_live_pairs, slot
from webhooks.models import OutboxEvent
from workspaces.actor import Actor


def move(persona: Persona, booking_id: str, span: dict[str, str], client: Any = None, **fields: Any) -> Any:
    return (client or persona.client).post(f"/bookings/{booking_id}/move", json={**span, **fields})


def test_a_move_keeps_the_booking_frees_the_old_span_and_restarts_the_bump_window(sdr, exec_assistant):
    cal = create_calendar(sdr, bump_window_seconds=600)["id"]
    old, new = slot(minutes=30), slot(minutes=60, offset_minutes=120)
    booking = created(commit(sdr, cal, old, title="Intro"))

    response = move(sdr, booking["id"], new)

    assert response.status_code == 200, response.text
    moved = response.json()
    assert (moved["id"], moved["status"], moved["title"]) == (booking["id"], "committed", "Intro")
    assert (moved["start_time"], moved["end_time"]) == (new["start_time"], new["end_time"])
    assert moved["fencing_token"] > booking["fencing_token"]
    assert parse(moved["bump_window_ends_at"]) > parse(booking["bump_window_ends_at"])
    created(hold(exec_assistant, cal, old))  # the old span is free for anyone
    (audited,) = audit_rows(event_type="calendar.booking.moved", reservation_public_id=booking["id"])
    assert audited.details["from"] == {"start_time": old["start_time"], "end_time": old["end_time"]}
    assert audited.details["to"] == {"start_time": new["start_time"], "end_time": new["end_time"]}
    (event,) = OutboxEvent.objects.filter(event_type="booking.moved")
    assert event.payload["booking"]["id"] == booking["id"]
    assert event.payload["booking"]["start_time"] == new["start_time"]
    assert event.payload["from"]["start_time"] == old["start_time"]


def test_a_move_to_the_span_the_booking_has_leaves_it_as_it_is(sdr):
    """A retry of a move without an Idempotency-Key: nothing moves, so the bump window is not restarted (a
    frozen booking stays frozen), the fencing token stays, and no one is told of a move."""
    cal = create_calendar(sdr, bump_window_seconds=600)["id"]
    span = slot(minutes=30)
    booking = created(commit(sdr, cal, span))

    again = move(sdr, booking["id"], span)

    assert again.status_code == 200, again.text
    assert again.json() == sdr.client.get(f"/bookings/{booking['id']}").json()
    assert (again.json()["fencing_token"], again.json()["bump_window_ends_at"]) == (
        booking["fencing_token"],
        booking["bump_window_ends_at"],
    )
    assert not audit_rows(event_type="calendar.booking.moved")
    assert not OutboxEvent.objects.filter(event_type="booking.moved").exists()


def test_a_move_onto_a_conflict_changes_nothing_on_any_calendar(sdr, exec_assistant):
    ana, ben = (create_calendar(sdr, name=n)["id"] for n in ("Ana", "Ben"))
    booking = created(commit(sdr, ana, slot(minutes=30), also_calendars=[ben]))
    taken = slot(minutes=30, offset_minutes=60)
    created(commit(exec_assistant, ben, taken))

    body = problem(move(sdr, booking["id"], taken), 409, "slot_conflict")

    assert body["conflicting"]["calendar"] == ben and body["alternatives"]
    after = sdr.client.get(f"/bookings/{booking['id']}").json()
    assert (after["start_time"], after["fencing_token"]) == (booking["start_time"], booking["fencing_token"])
    rows = Reservation.objects.filter(booking_id=booking["id"])
    assert {(r.start_time.isoformat(), r.status) for r in rows} == {
        (parse(booking["start_time"]).isoformat(), "committed")
    }
    assert audit_rows(event_type="calendar.booking.move.rejected", failure_reason="slot_conflict")


def test_a_multi_calendar_booking_moves_on_every_calendar(sdr):
    ana, ben = (create_calendar(sdr, name=n)["id"] for n in ("Ana", "Ben"))
    booking = created(commit(sdr, ana, slot(minutes=30), also_calendars=[ben]))
    new = slot(minutes=30, offset_minutes=90)

    moved = move(sdr, booking["id"], new).json()

    assert {c["calendar"] for c in moved["calendars"]} == {ana, ben}
    starts = set(Reservation.objects.filter(booking_id=booking["id"]).values_list("start_time", flat=True))
    assert starts == {parse(new["start_time"])}


def test_only_the_owner_moves_and_the_rules_and_fencing_token_hold(sdr, exec_assistant):
    cal = create_calendar(sdr, min_notice_minutes=60)["id"]
    booking = created(commit(sdr, cal, slot(minutes=30)))

    problem(move(exec_assistant, booking["id"], slot(minutes=30, offset_minutes=60)), 403, "not_owner")
    soon = server_now() + timedelta(minutes=20)
    too_soon = {"start_time": iso(soon), "end_time": iso(soon + timedelta(minutes=30))}
    problem(move(sdr, booking["id"], too_soon), 422, "insufficient_notice")
    stale = move(
        sdr, booking["id"], slot(minutes=30, offset_minutes=60), fencing_token=booking["fencing_token"] - 1
    )
    problem(stale, 409, "stale_fencing_token")
    ok = move(sdr, booking["id"], slot(minutes=30, offset_minutes=60), fencing_token=booking["fencing_token"])
    assert ok.status_code == 200, ok.text


def test_a_move_to_an_overlapping_span_is_not_in_its_own_way(sdr):
    cal = create_calendar(sdr, buffer_after_minutes=15)["id"]
    booking = created(commit(sdr, cal, slot(minutes=60)))
    assert move(sdr, booking["id"], slot(minutes=60, offset_minutes=30)).status_code == 200


def test_a_bumped_booking_moves_back_into_life_within_a_day_and_not_after(sdr, exec_assistant):
    cal = create_calendar(sdr, bump_window_seconds=600)["id"]
    span = slot(minutes=30)
    victim = created(commit(sdr, cal, span, priority=100))
    created(commit(exec_assistant, cal, span, priority=900))
    assert sdr.client.get(f"/bookings/{victim['id']}").json()["status"] == "bumped"

    back = move(sdr, victim["id"], slot(minutes=30, offset_minutes=60))

    assert back.status_code == 200, back.text
    assert back.json()["status"] == "committed" and back.json()["id"] == victim["id"]
    assert overlapping_live_pairs() == []

    second = created(commit(sdr, cal, slot(minutes=30, offset_minutes=120), priority=100))
    created(commit(exec_assistant, cal, slot(minutes=30, offset_minutes=120), priority=900))
    Reservation.objects.filter(booking_id=second["id"]).update(
        ended_at=parse(second["committed_at"]) - timedelta(hours=25)
    )
    body = problem(move(sdr, second["id"], slot(minutes=30, offset_minutes=180)), 409, "booking_not_live")
    assert body["booking_status"] == "bumped"


@pytest.mark.concurrency
def test_a_reader_never_sees_both_spans_held_nor_neither_while_a_booking_moves(sdr):
    cal = create_calendar(sdr)["id"]
    a, b = slot(minutes=30), slot(minutes=30, offset_minutes=60)
    booking = created(commit(sdr, cal, a))
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def read() -> None:
        from django.db import connections

        reader = connections.create_connection("default")
        with reader.cursor() as cursor:
            while not done.is_set():
                cursor.execute(
                    """SELECT count(*) FILTER (WHERE start_time = %s), count(*) FILTER (WHERE start_time = %s)
                         FROM bookings_reservation WHERE status = 'committed' AND booking_id = %s""",
                    [parse(a["start_time"]), parse(b["start_time"]), booking["id"]],
                )
                seen.append(cursor.fetchone())
        reader.close()

    reader = threading.Thread(target=read)
    reader.start()
    with sdr.new_client() as client:
        for n in range(20):
            response = move(sdr, booking["id"], b if n % 2 == 0 else a, client=client)
            assert response.status_code == 200, response.text
    done.set()
    reader.join(timeout=10)

    assert len(seen) > 20
    assert set(seen) <= {(1, 0), (0, 1)}, sorted(set(seen))


def test_a_move_by_search_takes_the_earliest_free_time_of_the_bookings_calendars(sdr, exec_assistant):
    ana, ben = (create_calendar(sdr, name=n)["id"] for n in ("Ana", "Ben"))
    booking = created(commit(sdr, ana, slot(minutes=30), also_calendars=[ben]))
    created(commit(exec_assistant, ben, slot(minutes=30, offset_minutes=30)))  # 00:30-01:00 taken on Ben
    window = {"start": slot(minutes=30)["start_time"], "end": slot(minutes=180)["end_time"]}

    search = {"calendars": [ben, ana], "duration_minutes": 60, **window}
    moved = sdr.client.post(f"/bookings/{booking['id']}/move", json={"search": search})

    assert moved.status_code == 200, moved.text
    # 00:00-01:00 overlaps Ben's other booking; the booking's own 00:00-00:30 is not in its way: 01:00.
    assert moved.json()["start_time"] == slot(minutes=30, offset_minutes=60)["start_time"]
    assert moved.json()["id"] == booking["id"]

    elsewhere = {"calendars": [ana], "duration_minutes": 30, **window}
    body = problem(
        sdr.client.post(f"/bookings/{booking['id']}/move", json={"search": elsewhere}), 400, "invalid_request"
    )
    assert "calendars" in body["errors"]["search"]
    both = {**slot(minutes=30, offset_minutes=240), "search": search}
    problem(sdr.client.post(f"/bookings/{booking['id']}/move", json=both), 400, "invalid_request")


def test_a_signed_in_person_moves_an_agents_booking_as_themselves(sdr):
    cal = create_calendar(sdr)["id"]
    booking = created(commit(sdr, cal, slot(minutes=30)))
    person = Actor(workspace=sdr.agent.workspace, agent=None, user_email="owner@acme.test")
    new = slot(minutes=30, offset_minutes=90)

    group = engine.booking_move(
        actor=person, booking_id=booking["id"], span=Span(parse(new["start_time"]), parse(new["end_time"]))
    )

    assert group.primary.booking_id == booking["id"] and group.primary.agent_id == sdr.agent.pk
    (audited,) = audit_rows(event_type="calendar.booking.moved", reservation_public_id=booking["id"])
    assert audited.actor_user == "owner@acme.test"
    with pytest.raises(NotOwner):
        engine.booking_move(
            actor=Actor(workspace=sdr.agent.workspace, agent=None),
            booking_id=booking["id"],
            span=Span(parse(new["start_time"]), parse(new["end_time"])),
        )
