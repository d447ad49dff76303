"""Find-and-hold (POST /v1/holds with `search`): the best common time held on every required calendar
in one locked write, over real HTTP; concurrent agents never double-hold."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from bookings.models import Reservation
from tests.bookings.helpers import NINE_TO_FIVE, commit, created, problem, utc
from tests.helpers import Persona, audit_rows, create_calendar, iso, overlapping_live_pairs


def find_and_hold(persona: Persona, client: Any = None, **search: Any) -> Any:
    extra: dict[str, Any] = {k: search.pop(k) for k in ("ttl_seconds", "title", "priority") if k in search}
    return (client or persona.client).post("/holds", json={"search": search, **extra})


def people(persona: Persona) -> list[str]:
    """Three people whose hours barely overlap: Berlin 09-17, New York 09-17, Kolkata 09-17 local.
    Berlin and New York share 15:00-17:00 Berlin (14:00-16:00Z in winter); Kolkata's day ends at
    11:30Z, so all three never share an hour: the tests pair them as they need."""
    return [
        create_calendar(persona, name=name, timezone=zone, working_hours=NINE_TO_FIVE)["id"]
        for name, zone in (
            ("Berlin", "Europe/Berlin"),
            ("New York", "America/New_York"),
            ("Kolkata", "Asia/Kolkata"),
        )
    ]


def window(start: datetime, end: datetime) -> dict[str, str]:
    return {"start": iso(start), "end": iso(end)}


def test_the_best_candidate_is_held_on_every_required_calendar(sdr):
    berlin, new_york, _ = people(sdr)
    # Monday 11 January 2027: the common hours are 14:00-16:00Z; 14:00-14:30 is taken on Berlin.
    created(
        commit(
            sdr, berlin, {"start_time": iso(utc(2027, 1, 11, 14)), "end_time": iso(utc(2027, 1, 11, 14, 30))}
        )
    )

    response = find_and_hold(
        sdr,
        calendars=[berlin, new_york],
        duration_minutes=30,
        title="Intro",
        **window(utc(2027, 1, 11), utc(2027, 1, 12)),
    )

    body = created(response)
    assert (body["start_time"], body["end_time"]) == (
        iso(utc(2027, 1, 11, 14, 30)),
        iso(utc(2027, 1, 11, 15)),
    )
    assert sorted(share["calendar"] for share in body["calendars"]) == sorted([berlin, new_york])
    assert body["candidate_rank"] == 1 and body["hold_token"].startswith("hlt_")
    assert response.headers["Location"] == f"/v1/holds/{body['id']}"
    row = audit_rows(event_type="calendar.hold.created", reservation_public_id=body["id"])[0]
    assert row.details["found_by_search"]["candidate_rank"] == 1


def test_no_common_working_hours_is_a_409_with_reasons(sdr):
    berlin, _, kolkata = people(sdr)
    new_york = create_calendar(sdr, name="NY", timezone="America/New_York", working_hours=NINE_TO_FIVE)["id"]

    body = problem(
        find_and_hold(
            sdr,
            calendars=[kolkata, new_york],
            duration_minutes=30,
            **window(utc(2027, 1, 11), utc(2027, 1, 16)),
        ),
        409,
        "no_slot_found",
    )
    assert body["reasons"] == {"no_common_working_hours": True}
    assert body["searched"] == window(utc(2027, 1, 11), utc(2027, 1, 16))
    assert Reservation.objects.count() == 0
    (refusal,) = audit_rows(event_type="calendar.hold.rejected", failure_reason="no_slot_found")
    assert (refusal.requested_start, refusal.requested_end) == (utc(2027, 1, 11), utc(2027, 1, 16))
    # Berlin and Kolkata do share 09:00-11:30Z... minus nothing: a slot exists.
    created(
        find_and_hold(
            sdr,
            calendars=[berlin, kolkata],
            duration_minutes=60,
            **window(utc(2027, 1, 11), utc(2027, 1, 12)),
        )
    )


def test_a_search_never_takes_anything_over(sdr, make_agent):
    boss = make_agent("boss", priority=900, max_priority=1000)
    berlin, new_york, _ = people(sdr)
    day = window(utc(2027, 1, 11, 14), utc(2027, 1, 11, 16))
    for start in (utc(2027, 1, 11, 14), utc(2027, 1, 11, 15)):
        created(commit(sdr, berlin, {"start_time": iso(start), "end_time": iso(start + timedelta(hours=1))}))

    problem(
        find_and_hold(boss, calendars=[berlin, new_york], duration_minutes=60, priority=1000, **day),
        409,
        "no_slot_found",
    )
    assert Reservation.objects.filter(status="committed").count() == 2


@pytest.mark.concurrency
def test_thirty_agents_at_once_get_thirty_distinct_holds_then_no_slot_found(make_agent):
    agents = [make_agent(f"agent-{n}") for n in range(30)]
    berlin, new_york, _ = people(agents[0])
    for cal in (berlin, new_york):
        agents[0].client.patch(f"/calendars/{cal}", json={"buffer_after_minutes": 10})
    # 14:00-16:00Z common on Mon-Fri 11-15 January: 2 h/day; 30-minute meetings 10 minutes apart
    # on a 10-minute grid → 3 a day (14:00, 14:40, 15:20), 15 in the week: 30 agents, 15 win.
    search = {
        "calendars": [berlin, new_york],
        "duration_minutes": 30,
        "granularity_minutes": 10,
        **window(utc(2027, 1, 11), utc(2027, 1, 16)),
    }

    def one(agent: Persona) -> Any:
        with agent.new_client() as client:
            return find_and_hold(agent, client=client, **search)

    with ThreadPoolExecutor(max_workers=30) as pool:
        answers = list(pool.map(one, agents))

    held = [a.json() for a in answers if a.status_code == 201]
    refused = [a.json() for a in answers if a.status_code != 201]
    assert len(held) == 15, [a.text for a in answers if a.status_code not in (201, 409)]
    assert all(r["error"] == "no_slot_found" for r in refused) and len(refused) == 15
    assert len({h["start_time"] for h in held}) == 15
    assert overlapping_live_pairs() == []
    with connection.cursor() as cursor:  # nothing inside another's 10-minute buffer on either calendar
        cursor.execute(
            """SELECT count(*) FROM bookings_reservation a JOIN bookings_reservation b
                 ON a.calendar_id = b.calendar_id AND a.id < b.id
              WHERE a.status IN ('held', 'committed') AND b.status IN ('held', 'committed')
                AND a.start_time < b.end_time + interval '10 minutes'
                AND b.start_time < a.end_time + interval '10 minutes'"""
        )
        assert cursor.fetchone()[0] == 0
