"""Issue test 1: ten agents commit the same 30-minute slot at once through the live HTTP server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest

from bookings.models import Reservation, ReservationStatus
from tests.helpers import audit_rows, create_calendar, overlapping_live_pairs, slot

pytestmark = [pytest.mark.slow, pytest.mark.concurrency]


def test_exactly_one_of_ten_concurrent_commits_wins(make_agent):
    racers = [make_agent(f"racer-{i}", priority=100) for i in range(10)]
    cal = create_calendar(racers[0])
    span = slot(hours_ahead=48)
    barrier = Barrier(len(racers))

    def commit(persona):
        with persona.new_client() as client:
            barrier.wait()  # release all ten requests together
            return client.post(f"/calendars/{cal['id']}/commits", json=span)

    with ThreadPoolExecutor(max_workers=len(racers)) as pool:
        responses = list(pool.map(commit, racers))

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] + [409] * 9, [r.text for r in responses]
    losers = [r.json() for r in responses if r.status_code == 409]
    assert all(body["error"] == "slot_conflict" and body["retryable"] is False for body in losers)
    assert all(body["alternatives"] for body in losers)
    assert all(
        r.headers["content-type"] == "application/problem+json" for r in responses if r.status_code == 409
    )

    live = Reservation.objects.filter(
        calendar__public_id=cal["id"], status__in=[ReservationStatus.COMMITTED, ReservationStatus.HELD]
    )
    assert live.count() == 1
    assert overlapping_live_pairs(cal["id"]) == []
    assert len(audit_rows(event_type="calendar.commit.created", calendar_public_id=cal["id"])) == 1
    assert len(audit_rows(event_type="calendar.commit.rejected", calendar_public_id=cal["id"])) == 9
