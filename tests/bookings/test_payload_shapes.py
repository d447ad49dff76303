"""The hold and booking answers are built by hand for speed; the output serializers still define the
published schema. Every shape here must be exactly what the serializer renders from the same rows:
the same keys in the same order, the same values, timestamps included."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from bookings import engine
from bookings.payloads import BookingOutput, HoldOutput, booking_payload, hold_payload
from tests.bookings.helpers import half_hour
from workspaces.actor import Actor
from workspaces.models import Agent


def _rendered_by_serializer(
    group: engine.ReservationGroup, output: type, now: datetime | None
) -> dict[str, Any]:
    """What the serializer makes of the rows themselves (model values, datetimes unformatted)."""
    head, rows = group.primary, group.rows
    raw: dict[str, Any] = {
        "id": head.hold_id if output is HoldOutput else head.booking_id,
        "hold_id": head.hold_id,
        "status": head.status if now is None else head.status_at(now),
        "calendar": head.calendar.public_id,
        "also_calendars": [r.calendar.public_id for r in rows[1:]],
        "calendars": [{"calendar": r.calendar.public_id, "fencing_token": r.fencing_token} for r in rows],
        "start_time": head.start_time,
        "end_time": head.end_time,
        "priority": head.priority,
        "fencing_token": head.fencing_token,
        "agent_id": head.agent.public_id,
        "title": head.title,
        "attendees": head.attendees,
        "metadata": head.metadata,
        "created_at": head.created_at,
        "ended_at": head.ended_at,
        "expires_at": head.expires_at,
        "booking_id": head.booking_id,
        "committed_at": head.committed_at,
        "bump_window_ends_at": head.bump_window_ends_at,
        "frozen": now is not None and head.is_frozen_at(now),
        "upstream_conflict": any(r.upstream_conflict_at is not None for r in rows),
    }
    if group.hold_token:
        raw["hold_token"] = group.hold_token
    if group.displaced:
        raw["displaced"] = [
            {
                "id": r.booking_id or r.hold_id,
                "status": r.status,
                "agent_id": r.agent.public_id,
                "priority": r.priority,
            }
            for r in group.displaced
            if r.is_primary
        ]
    return dict(output(raw).data)


def _assert_same(built: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(built) == list(expected)  # key order too: it is what clients see
    assert built == expected


def test_hold_answers_match_the_serializer(actor: Actor) -> None:
    rooms = [engine.calendar_create(actor=actor, name=f"room {i}") for i in range(2)]
    plain = engine.hold_create(actor=actor, calendar=rooms[0], span=half_hour(30), title="Intro")
    multi = engine.hold_create(
        actor=actor, calendar=rooms[0], span=half_hour(32), also_calendars=[rooms[1]], metadata={"k": [1]}
    )
    urgent = Actor(
        workspace=actor.workspace,
        agent=Agent.objects.create(
            workspace=actor.workspace, name="ea", slug="ea", priority=300, max_priority=500
        ),
    )
    evicting = engine.hold_create(actor=urgent, calendar=rooms[0], span=half_hour(30), priority=300)
    assert evicting.displaced, "the urgent hold evicted the first"

    for group in (plain, multi, evicting):
        _assert_same(hold_payload(group), _rendered_by_serializer(group, HoldOutput, None))
    # Read back later, as GET answers it: no token, a status as of the database's clock.
    later = plain.primary.created_at + timedelta(hours=1)
    reread = engine.ReservationGroup(rows=multi.rows)
    _assert_same(hold_payload(reread, now=later), _rendered_by_serializer(reread, HoldOutput, later))
    assert hold_payload(reread, now=later)["status"] == "expired"


def test_booking_answers_match_the_serializer(actor: Actor) -> None:
    room = engine.calendar_create(actor=actor, name="room")
    held = engine.hold_create(actor=actor, calendar=room, span=half_hour(30), attendees=[{"email": "a@b.c"}])
    assert held.hold_token is not None
    booked = engine.hold_commit(actor=actor, calendar=room, hold_token=held.hold_token)

    _assert_same(booking_payload(booked), _rendered_by_serializer(booked, BookingOutput, None))
    assert booked.primary.committed_at is not None
    frozen_at = booked.primary.committed_at + timedelta(minutes=5)
    _assert_same(
        booking_payload(booked, now=frozen_at), _rendered_by_serializer(booked, BookingOutput, frozen_at)
    )
    assert booking_payload(booked, now=frozen_at)["frozen"] is True
    assert booking_payload(booked)["start_time"].endswith("Z")
