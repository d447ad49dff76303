"""The availability search within the calendars' rules, and find-and-hold when a candidate is taken
between its search and its lock (a real concurrent writer holding the calendar's lock)."""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, transaction

from agentcal.clock import server_now
from bookings import engine
from bookings.models import BusyBlock, Calendar, Reservation
from bookings.search import SearchQuery, find_common_time, rank, read_calendars
from bookings.spans import Span
from tests.bookings.helpers import NINE_TO_FIVE, commit, created, utc
from tests.helpers import (
    Persona,
    backends_blocked_by_this_transaction,
    create_calendar,
    iso,
    overlapping_live_pairs,
)


def search(persona: Persona, **body: Any) -> dict[str, Any]:
    response = persona.client.post("/availability/search", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def starts(body: dict[str, Any]) -> list[str]:
    return [c["start_time"] for c in body["candidates"]]


def test_three_zones_share_only_their_overlap_across_the_us_and_eu_dst_changes(sdr):
    """Berlin and New York 09:00-17:00, Kolkata 09:00-18:00 local: between 14 March (US change) and
    28 March 2027 (EU change) New York is only 5 hours behind Berlin, not 6."""
    berlin, new_york = (
        create_calendar(sdr, name=zone, timezone=zone, working_hours=NINE_TO_FIVE)["id"]
        for zone in ("Europe/Berlin", "America/New_York")
    )

    def first_common(day: datetime) -> list[str]:
        body = search(
            sdr,
            calendars=[berlin, new_york],
            duration_minutes=60,
            limit=10,
            start=iso(day),
            end=iso(day + timedelta(days=1)),
        )
        return starts(body)

    # Wednesday 10 March: Berlin UTC+1, New York UTC-5 → common 14:00-16:00Z.
    assert first_common(utc(2027, 3, 10)) == [
        iso(utc(2027, 3, 10, 14)),
        iso(utc(2027, 3, 10, 14, 30)),
        iso(utc(2027, 3, 10, 15)),
    ]
    # Wednesday 17 March: New York now UTC-4 → common 13:00-16:00Z.
    assert first_common(utc(2027, 3, 17))[0] == iso(utc(2027, 3, 17, 13))
    assert first_common(utc(2027, 3, 17))[-1] == iso(utc(2027, 3, 17, 15))
    # Wednesday 31 March: Berlin UTC+2 too → common 13:00-15:00Z.
    assert first_common(utc(2027, 3, 31))[-1] == iso(utc(2027, 3, 31, 14))
    # Kolkata (UTC+5:30, 09-18 → 03:30-12:30Z) and New York never meet.
    kolkata = create_calendar(
        sdr, name="Kolkata", timezone="Asia/Kolkata", working_hours={"mon": [["09:00", "18:00"]]}
    )["id"]
    body = search(
        sdr,
        calendars=[kolkata, new_york],
        duration_minutes=30,
        start=iso(utc(2027, 3, 15)),
        end=iso(utc(2027, 3, 16)),
    )
    assert body["candidates"] == [] and body["reasons"] == {"no_common_working_hours": True}


def test_buffers_widen_reservations_and_busy_blocks_in_the_search(sdr):
    calendar = create_calendar(sdr, name="AE", buffer_before_minutes=15, slot_minutes=15)["id"]
    day = (server_now() + timedelta(days=3)).replace(hour=10, minute=0, second=0, microsecond=0)
    created(commit(sdr, calendar, {"start_time": iso(day), "end_time": iso(day + timedelta(minutes=30))}))
    BusyBlock.objects.create(
        calendar=Calendar.objects.get(public_id=calendar),
        source="caldav",
        connection_id=1,
        event_key="x",
        start_time=day + timedelta(hours=1),
        end_time=day + timedelta(hours=1, minutes=15),
    )

    body = search(
        sdr,
        calendars=[calendar],
        duration_minutes=15,
        limit=20,
        start=iso(day - timedelta(minutes=45)),
        end=iso(day + timedelta(hours=2)),
    )

    # Busy 10:00-10:30 and 11:00-11:15, each with 15 minutes kept either side: 09:45-11:30 is taken.
    free = [day + timedelta(minutes=m) for m in (-45, -30, 90, 105)]
    assert starts(body) == [iso(s) for s in free]


def test_notice_and_overrides_in_the_search_and_why_it_is_empty(sdr):
    calendar = create_calendar(
        sdr,
        name="AE",
        timezone="Europe/Berlin",
        working_hours=NINE_TO_FIVE,
        min_notice_minutes=3 * 24 * 60,
        date_overrides={"2027-12-24": []},
    )["id"]
    soon = server_now()
    body = search(
        sdr, calendars=[calendar], duration_minutes=30, start=iso(soon), end=iso(soon + timedelta(days=2))
    )
    assert body["reasons"] == {"insufficient_notice": True}

    body = search(
        sdr,
        calendars=[calendar],
        duration_minutes=30,
        start=iso(utc(2027, 12, 24)),
        end=iso(utc(2027, 12, 25)),
    )
    assert body["reasons"] == {"no_common_working_hours": True}

    body = search(
        sdr,
        calendars=[calendar],
        duration_minutes=30,
        limit=1,
        start=iso(utc(2027, 12, 23)),
        end=iso(utc(2027, 12, 24)),
    )
    assert starts(body) == [iso(utc(2027, 12, 23, 8))]  # 09:00 in Berlin


@pytest.mark.concurrency
def test_a_candidate_taken_between_the_search_and_the_lock_is_skipped(sdr, exec_assistant):
    ana, ben = (create_calendar(sdr, name=n)["id"] for n in ("Ana", "Ben"))
    rows = {c.public_id: c for c in Calendar.objects.filter(public_id__in=[ana, ben])}
    first_locked = min(rows.values(), key=lambda c: c.pk)
    start = (server_now() + timedelta(days=5)).replace(hour=9, minute=0, second=0, microsecond=0)
    answer: dict[str, Any] = {}

    def find_and_hold() -> None:
        with sdr.new_client() as client:
            answer["response"] = client.post(
                "/holds",
                json={
                    "search": {
                        "calendars": [ana, ben],
                        "duration_minutes": 30,
                        "start": iso(start),
                        "end": iso(start + timedelta(hours=4)),
                    }
                },
            )

    # Another writer holds the first calendar's lock (as every engine write does), so find-and-hold's
    # search runs and it then waits for the lock; meanwhile that writer takes the best candidate.
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE bookings_calendar SET version = version + 1 WHERE id = %s", [first_locked.pk]
            )
        worker = threading.Thread(target=find_and_hold)
        worker.start()
        _wait_for_a_lock_wait()
        Reservation.objects.create(
            hold_id="hld_taken",
            booking_id="bk_taken",
            calendar=first_locked,
            agent=exec_assistant.agent,
            status="committed",
            priority=500,
            start_time=start,
            end_time=start + timedelta(minutes=30),
            fencing_token=first_locked.version + 1,
            committed_at=start - timedelta(days=1),
            bump_window_ends_at=start - timedelta(days=1),
        )
    worker.join(timeout=30)

    body = answer["response"].json()
    assert answer["response"].status_code == 201, body
    assert body["start_time"] == iso(start + timedelta(minutes=30)) and body["candidate_rank"] == 2
    assert overlapping_live_pairs() == []


def _wait_for_a_lock_wait(deadline: float = 15.0) -> None:
    """Until find-and-hold waits behind our transaction's lock."""
    ends = time.monotonic() + deadline
    while time.monotonic() < ends:
        if backends_blocked_by_this_transaction():
            return
        time.sleep(0.02)
    raise AssertionError("find-and-hold never waited for the calendar's lock")


def test_the_search_is_zone_correct_for_an_hour_repeated_when_clocks_go_back(sdr):
    """New York, Sunday 7 November 2027: 01:00-02:00 happens twice; 00:00-01:30 ends at the first 01:30."""
    calendar = create_calendar(
        sdr, name="NY", timezone="America/New_York", working_hours={"sun": [["00:00", "01:30"]]}
    )["id"]
    body = search(
        sdr,
        calendars=[calendar],
        duration_minutes=30,
        limit=10,
        start=iso(utc(2027, 11, 7)),
        end=iso(utc(2027, 11, 8)),
    )
    local = [datetime.fromisoformat(s).astimezone(ZoneInfo("America/New_York")) for s in starts(body)]
    assert [(t.hour, t.minute, t.fold) for t in local] == [(0, 0, 0), (0, 30, 0), (1, 0, 0)]


def test_a_calendars_free_slots_are_within_its_rules(sdr):
    calendar = create_calendar(
        sdr,
        name="AE",
        timezone="Europe/Berlin",
        working_hours={"mon": [["09:00", "10:00"]]},
        buffer_after_minutes=30,
    )["id"]
    # Monday 11 January 2027, 09:00-09:30 Berlin (08:00Z) is booked; 30 minutes are kept after it.
    created(
        commit(
            sdr, calendar, {"start_time": iso(utc(2027, 1, 11, 8)), "end_time": iso(utc(2027, 1, 11, 8, 30))}
        )
    )

    response = sdr.client.get(
        f"/calendars/{calendar}/availability",
        params={"start": iso(utc(2027, 1, 11)), "end": iso(utc(2027, 1, 12)), "duration_minutes": 30},
    )

    assert response.status_code == 200, response.text
    assert response.json()["free_slots"] == []  # 09:30-10:00 is the booking's buffer; the rest is closed
    assert len(response.json()["busy"]) == 1


def test_reading_the_window_a_stretch_at_a_time_answers_what_reading_all_of_it_would(actor):
    """An earliest-first search reads three days, then twice as far each time: over random busy weeks
    (a first free time past several stretches included) it answers what one full read does."""
    rng = random.Random(7)
    start = (server_now() + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    calendars = [
        engine.calendar_create(actor=actor, name=f"P{n}", timezone=zone, working_hours=NINE_TO_FIVE)
        for n, zone in enumerate(("Europe/Berlin", "America/New_York"))
    ]
    for trial in range(6):
        BusyBlock.objects.all().delete()
        blocked_days = (0, 2, 5, 11, 5, 11)[trial]  # everyone busy this long, from the start
        for calendar in calendars:
            rows = [(start, start + timedelta(days=blocked_days))] if blocked_days else []
            for _ in range(rng.randrange(20, 120)):
                begins = start + timedelta(minutes=15 * rng.randrange(30 * 24 * 4))
                rows.append((begins, begins + timedelta(minutes=rng.choice((15, 30, 60, 120)))))
            BusyBlock.objects.bulk_create(
                BusyBlock(
                    calendar=calendar,
                    source="caldav",
                    connection_id=1,
                    event_key=f"{trial}-{n}",
                    start_time=a,
                    end_time=b,
                )
                for n, (a, b) in enumerate(rows)
            )
        query = SearchQuery(
            required=[c.public_id for c in calendars],
            duration=timedelta(minutes=rng.choice((30, 60))),
            window=Span(start, start + timedelta(days=30)),
            limit=rng.choice((1, 5, 20)),
        )
        found = find_common_time(workspace_id=actor.workspace.pk, query=query)
        whole = rank(read_calendars(actor.workspace.pk, query.required, query.window), query)

        assert found.candidates == whole.candidates, (trial, blocked_days)
        assert (found.truncated, found.searched, found.reasons) == (
            whole.truncated,
            whole.searched,
            whole.reasons,
        )
