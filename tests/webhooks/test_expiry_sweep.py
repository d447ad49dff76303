"""The beat sweep expires lapsed holds exactly once, even when two workers run it at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from django.db import connection

from audit.models import AuditRecord
from bookings.engine import holds_expire_lapsed
from bookings.models import Reservation, ReservationStatus
from tests.helpers import create_calendar, slot
from tests.webhooks.helpers import wait_until
from webhooks.models import OutboxEvent

pytestmark = pytest.mark.slow


def _all_lapsed() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT bool_and(expires_at <= now()) FROM bookings_reservation WHERE status = 'held'")
        return bool(cursor.fetchone()[0])


@pytest.mark.concurrency
def test_two_concurrent_sweeps_expire_each_hold_once_with_one_audit_row_each(make_agent):
    agent = make_agent("sweeper", priority=100)
    calendars = [create_calendar(agent, hold_ttl_seconds=1)["id"] for _ in range(3)]
    holds = []
    for i in range(9):
        cal = calendars[i % 3]
        response = agent.client.post(f"/calendars/{cal}/holds", json=slot(hours_ahead=50 + i))
        assert response.status_code == 201
        holds.append(response.json()["id"])
    # One multi-calendar hold: its rows on every calendar expire together, as one hold.
    multi = agent.client.post(
        f"/calendars/{calendars[0]}/holds", json={**slot(hours_ahead=70), "also_calendars": calendars[1:]}
    )
    holds.append(multi.json()["id"])

    wait_until(_all_lapsed, timeout=10)
    barrier = Barrier(2)

    def sweep() -> int:
        barrier.wait()
        try:
            return holds_expire_lapsed()
        finally:
            connection.close()  # this thread's own connection

    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(lambda _: sweep(), range(2)))

    assert sum(counts) == len(holds)
    assert holds_expire_lapsed() == 0  # idempotent: nothing left to do
    assert set(Reservation.objects.values_list("status", flat=True)) == {ReservationStatus.EXPIRED}
    audited = list(
        AuditRecord.objects.filter(event_type="calendar.hold.expired").values_list(
            "reservation_public_id", flat=True
        )
    )
    assert sorted(audited) == sorted(holds)
    events = OutboxEvent.objects.filter(event_type="hold.expired")
    assert sorted(e.payload["hold"]["id"] for e in events) == sorted(holds)
    assert all(e.payload["hold"]["status"] == "expired" for e in events)


def test_the_sweep_bumps_the_calendar_version(make_agent):
    agent = make_agent("versioned", priority=100)
    cal = create_calendar(agent, hold_ttl_seconds=1)["id"]
    agent.client.post(f"/calendars/{cal}/holds", json=slot(hours_ahead=80)).raise_for_status()
    before = agent.client.get(f"/calendars/{cal}").json()["version"]
    wait_until(_all_lapsed, timeout=10)
    assert holds_expire_lapsed() == 1
    assert agent.client.get(f"/calendars/{cal}").json()["version"] == before + 1
