"""Holds over several calendars (`also_calendars`): all or nothing, committed together, no deadlocks."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest

from tests.bookings.helpers import commit_hold, created, hold, problem, rows_of
from tests.helpers import audit_rows, create_calendar, overlapping_live_pairs, slot


@pytest.fixture
def three_calendars(sdr):
    return [create_calendar(sdr, name=f"Room {i}")["id"] for i in range(3)]


def _version(persona, calendar_id, span):
    response = persona.client.get(
        f"/calendars/{calendar_id}/availability",
        params={"start": span["start_time"], "end": span["end_time"]},
    )
    return response.json()["version"]


def test_a_hold_over_three_calendars_blocks_each_of_them(sdr, make_agent, three_calendars):
    peer = make_agent("peer", priority=100, max_priority=100)
    first, second, third = three_calendars
    span = slot()

    held = created(hold(sdr, first, span, also_calendars=[second, third]))

    assert held["calendar"] == first
    assert held["also_calendars"] == [second, third]
    assert sorted(c["calendar"] for c in held["calendars"]) == sorted(three_calendars)
    for cal in three_calendars:
        assert [(r.hold_id, r.status) for r in rows_of(cal)] == [(held["id"], "held")]
        body = problem(hold(peer, cal, span), 409, "slot_conflict")
        assert body["conflicting"]["calendar"] == cal


def test_it_writes_nothing_on_any_calendar_when_one_is_busy(sdr, make_agent, three_calendars):
    peer = make_agent("peer", priority=100, max_priority=100)
    first, second, third = three_calendars
    span = slot()
    created(hold(peer, third, span))
    versions_before = {cal: _version(sdr, cal, span) for cal in (first, second)}

    body = problem(hold(sdr, first, span, also_calendars=[second, third]), 409, "slot_conflict")

    assert body["conflicting"]["calendar"] == third
    assert rows_of(first) == []
    assert rows_of(second) == []
    assert [r.agent.public_id for r in rows_of(third)] == [peer.id]
    assert {cal: _version(sdr, cal, span) for cal in (first, second)} == versions_before
    rejected = audit_rows(event_type="calendar.hold.rejected", agent_public_id=sdr.id)
    assert [r.failure_reason for r in rejected] == ["slot_conflict"]


def test_committing_the_hold_commits_every_calendar(sdr, three_calendars):
    first, second, third = three_calendars
    held = created(hold(sdr, first, slot(), also_calendars=[second, third]))

    booking = created(commit_hold(sdr, first, held["hold_token"]))

    assert booking["also_calendars"] == [second, third]
    for cal in three_calendars:
        assert [(r.booking_id, r.status) for r in rows_of(cal)] == [(booking["id"], "committed")]
    assert sdr.client.get(f"/holds/{held['id']}").json()["status"] == "committed"


def test_cancelling_a_multi_calendar_booking_frees_every_calendar(sdr, make_agent, three_calendars):
    peer = make_agent("peer", priority=100, max_priority=100)
    first, second, third = three_calendars
    span = slot()
    held = created(hold(sdr, first, span, also_calendars=[second, third]))
    booking = created(commit_hold(sdr, first, held["hold_token"]))

    assert sdr.client.delete(f"/bookings/{booking['id']}").status_code == 200

    for cal in three_calendars:
        assert [r.status for r in rows_of(cal)] == ["cancelled"]
        created(hold(peer, cal, span))


def test_evicting_a_multi_calendar_hold_on_one_calendar_evicts_it_everywhere(
    sdr, exec_assistant, three_calendars
):
    first, second, third = three_calendars
    span = slot()
    victim = created(hold(sdr, first, span, also_calendars=[second, third]))

    winner = created(hold(exec_assistant, second, span))

    assert [d["id"] for d in winner["displaced"]] == [victim["id"]]
    for cal in three_calendars:
        assert [r.status for r in rows_of(cal, hold_id=victim["id"])] == ["evicted"]
    assert sdr.client.get(f"/holds/{victim['id']}").json()["status"] == "evicted"
    assert len(audit_rows(event_type="calendar.hold.evicted", reservation_public_id=victim["id"])) == 1


@pytest.mark.slow
@pytest.mark.concurrency
def test_opposite_order_multi_calendar_requests_never_deadlock(make_agent):
    alice = make_agent("alice", priority=100, max_priority=100)
    bob = make_agent("bob", priority=100, max_priority=100)
    cal_one = create_calendar(alice, name="One")["id"]
    cal_two = create_calendar(alice, name="Two")["id"]
    rounds = 12
    barrier = Barrier(2)

    def play(persona, primary, also):
        results = []
        with persona.new_client() as client:
            for n in range(rounds):
                span = slot(minutes=30, offset_minutes=30 * n)
                barrier.wait(timeout=30)  # both requests of a round start together
                results.append(
                    client.post(f"/calendars/{primary}/holds", json={**span, "also_calendars": [also]})
                )
        return results

    with ThreadPoolExecutor(max_workers=2) as pool:
        alice_future = pool.submit(play, alice, cal_one, cal_two)
        bob_future = pool.submit(play, bob, cal_two, cal_one)
        alice_results, bob_results = alice_future.result(timeout=120), bob_future.result(timeout=120)

    for n, (a, b) in enumerate(zip(alice_results, bob_results, strict=True)):
        assert sorted([a.status_code, b.status_code]) == [201, 409], (n, a.text, b.text)
        loser = a if a.status_code == 409 else b
        assert loser.json()["error"] == "slot_conflict"
    for cal in (cal_one, cal_two):
        assert len(rows_of(cal, status="held")) == rounds
    winners = {r.json()["id"] for r in [*alice_results, *bob_results] if r.status_code == 201}
    assert {r.hold_id for r in rows_of(cal_one)} == winners == {r.hold_id for r in rows_of(cal_two)}
    assert overlapping_live_pairs() == []
