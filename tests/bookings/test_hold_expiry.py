"""Holds lapse on the database's clock; a lapsed hold never blocks, whether or not a sweep has run."""

from __future__ import annotations

from tests.bookings.helpers import (
    commit,
    commit_hold,
    created,
    hold,
    problem,
    rows_of,
    wait_for_hold_status,
)
from tests.helpers import audit_rows, slot


def test_it_lets_another_agent_hold_the_range_once_the_hold_expired(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    first = created(hold(sdr, calendar["id"], span, ttl_seconds=3))
    assert first["status"] == "held"

    # While it is live, the hold blocks an equal-priority rival.
    problem(hold(rival, calendar["id"], span), 409, "slot_conflict")

    wait_for_hold_status(sdr, first["id"], "expired")
    second = created(hold(rival, calendar["id"], span))

    assert second["status"] == "held"
    assert second["fencing_token"] > first["fencing_token"]
    # The rival's write expired the lapsed hold in its own transaction, and audited it.
    assert [r.status for r in rows_of(calendar["id"], hold_id=first["id"])] == ["expired"]
    expired = audit_rows(event_type="calendar.hold.expired", reservation_public_id=first["id"])
    assert len(expired) == 1
    assert expired[0].details["expired_lazily"] is True


def test_an_expired_hold_never_blocks_even_before_any_sweep_ran(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    lapsed = created(hold(sdr, calendar["id"], span, ttl_seconds=1))
    wait_for_hold_status(sdr, lapsed["id"], "expired")

    # Nothing has touched the row yet: it is still 'held' in the table, only past its expiry.
    assert [r.status for r in rows_of(calendar["id"], hold_id=lapsed["id"])] == ["held"]
    availability = sdr.client.get(
        f"/calendars/{calendar['id']}/availability",
        params={"start": span["start_time"], "end": span["end_time"]},
    ).json()
    assert availability["busy"] == []

    booking = created(commit(rival, calendar["id"], span))

    assert booking["status"] == "committed"
    assert sdr.client.get(f"/holds/{lapsed['id']}").json()["status"] == "expired"


def test_a_lapsed_hold_can_be_neither_committed_nor_extended(sdr, calendar):
    lapsed = created(hold(sdr, calendar["id"], slot(), ttl_seconds=1))
    wait_for_hold_status(sdr, lapsed["id"], "expired")

    committed = commit_hold(sdr, calendar["id"], lapsed["hold_token"])
    extended = sdr.client.post(
        f"/holds/{lapsed['id']}/extend", json={"hold_token": lapsed["hold_token"], "ttl_seconds": 60}
    )

    assert problem(committed, 409, "hold_expired")["hold_id"] == lapsed["id"]
    problem(extended, 409, "hold_expired")
    assert sdr.client.get(f"/holds/{lapsed['id']}").json()["status"] == "expired"
    assert rows_of(calendar["id"], status="committed") == []
    rejected = audit_rows(agent_public_id=sdr.id, outcome="rejected")
    assert sorted((r.event_type, r.failure_reason) for r in rejected) == [
        ("calendar.commit.rejected", "hold_expired"),
        ("calendar.hold.extend.rejected", "hold_expired"),
    ]
