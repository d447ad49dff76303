"""Priority preemption of live holds: strictly greater evicts, ties keep the first writer, no cascades."""

from __future__ import annotations

from datetime import timedelta

from tests.bookings.helpers import (
    commit_hold,
    created,
    hold,
    live_spans,
    overlaps,
    parse,
    problem,
    rows_of,
)
from tests.helpers import audit_rows, slot


def test_it_evicts_a_live_hold_for_a_strictly_higher_priority(sdr, exec_assistant, calendar):
    span = slot()
    victim = created(hold(sdr, calendar["id"], span, priority=100))

    winner = created(hold(exec_assistant, calendar["id"], span, priority=101))

    assert winner["displaced"] == [
        {"id": victim["id"], "status": "evicted", "agent_id": sdr.id, "priority": 100}
    ]
    assert sdr.client.get(f"/holds/{victim['id']}").json()["status"] == "evicted"
    evicted = audit_rows(event_type="calendar.hold.evicted", calendar_public_id=calendar["id"])
    assert len(evicted) == 1
    assert evicted[0].reservation_public_id == victim["id"]
    assert evicted[0].details["displaced_by"] == winner["id"]
    assert evicted[0].details["displaced_by_priority"] == 101


def test_the_evicted_agent_can_neither_extend_nor_commit(sdr, exec_assistant, calendar):
    span = slot()
    victim = created(hold(sdr, calendar["id"], span))
    created(hold(exec_assistant, calendar["id"], span))

    extend = sdr.client.post(
        f"/holds/{victim['id']}/extend", json={"hold_token": victim["hold_token"], "ttl_seconds": 60}
    )
    commit = commit_hold(sdr, calendar["id"], victim["hold_token"])

    problem(extend, 409, "hold_evicted")
    problem(commit, 409, "hold_evicted")
    assert sdr.client.get(f"/holds/{victim['id']}").json()["status"] == "evicted"
    assert [r.failure_reason for r in audit_rows(event_type="calendar.hold.extend.rejected")] == [
        "hold_evicted"
    ]
    assert [r.failure_reason for r in audit_rows(event_type="calendar.commit.rejected")] == ["hold_evicted"]
    assert rows_of(calendar["id"], status="committed") == []


def test_it_rejects_equal_priority(sdr, make_agent, calendar):
    peer = make_agent("peer", priority=100, max_priority=100)
    blocker_span = slot(minutes=60)
    blocker = created(hold(sdr, calendar["id"], blocker_span, priority=100))
    # Starts half-way into the blocker: the first overlap is in the 30-minute bucket at :30.
    request = slot(minutes=60, offset_minutes=30)

    body = problem(hold(peer, calendar["id"], request, priority=100), 409, "slot_conflict")

    assert body["held_by_priority"] == 100
    assert body["caller_priority"] == 100
    assert body["retryable"] is False
    assert body["conflicting"] == {
        "calendar": calendar["id"],
        "start_time": blocker_span["start_time"],
        "end_time": blocker_span["end_time"],
        "status": "held",
        "priority": 100,
        "agent_id": sdr.id,
        "expires_at": blocker["expires_at"].replace("+00:00", "Z"),
    }
    assert body["conflicting_bucket"] == "BUCKET#" + request["start_time"]
    assert sdr.client.get(f"/holds/{blocker['id']}").json()["status"] == "held"
    rejected = audit_rows(event_type="calendar.hold.rejected", calendar_public_id=calendar["id"])
    assert [(r.agent_public_id, r.failure_reason) for r in rejected] == [(peer.id, "slot_conflict")]
    assert rejected[0].conflict_details["held_by_priority"] == 100


def test_slot_conflict_offers_up_to_three_free_alternatives_of_the_same_length(sdr, make_agent, calendar):
    peer = make_agent("peer", priority=100, max_priority=100)
    request = slot(minutes=60)
    created(hold(sdr, calendar["id"], request))
    # Crowd the neighbourhood so some nearby candidates are taken too.
    created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=90)))
    created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=-60)))

    body = problem(hold(peer, calendar["id"], request), 409, "slot_conflict")

    alternatives = body["alternatives"]
    assert 1 <= len(alternatives) <= 3
    length = parse(request["end_time"]) - parse(request["start_time"])
    busy = live_spans(calendar["id"])
    for alternative in alternatives:
        assert parse(alternative["end_time"]) - parse(alternative["start_time"]) == length
        assert not any(overlaps(alternative, taken) for taken in busy), alternative
    distances = [abs(parse(a["start_time"]) - parse(request["start_time"])) for a in alternatives]
    assert distances == sorted(distances)  # nearest first
    assert len({a["start_time"] for a in alternatives}) == len(alternatives)
    assert all(d > timedelta(0) for d in distances)


def test_it_rejects_a_priority_above_the_agents_maximum(sdr, calendar):
    body = problem(hold(sdr, calendar["id"], slot(), priority=201), 403, "priority_not_allowed")

    assert body["max_priority"] == 200
    assert body["requested_priority"] == 201
    assert rows_of(calendar["id"]) == []
    rejected = audit_rows(event_type="calendar.hold.rejected", calendar_public_id=calendar["id"])
    assert [(r.failure_reason, r.http_status) for r in rejected] == [("priority_not_allowed", 403)]


def test_a_lower_priority_cannot_evict(sdr, exec_assistant, calendar):
    span = slot()
    incumbent = created(hold(exec_assistant, calendar["id"], span, priority=500))

    body = problem(hold(sdr, calendar["id"], span, priority=200), 409, "slot_conflict")

    assert body["held_by_priority"] == 500
    assert body["caller_priority"] == 200
    assert exec_assistant.client.get(f"/holds/{incumbent['id']}").json()["status"] == "held"
    assert audit_rows(event_type="calendar.hold.evicted") == []


def test_eviction_takes_only_what_it_overlaps(sdr, exec_assistant, calendar):
    overlapped = created(hold(sdr, calendar["id"], slot(minutes=30)))
    elsewhere = created(hold(sdr, calendar["id"], slot(minutes=30, offset_minutes=60)))

    winner = created(hold(exec_assistant, calendar["id"], slot(minutes=30)))

    assert [d["id"] for d in winner["displaced"]] == [overlapped["id"]]
    assert sdr.client.get(f"/holds/{overlapped['id']}").json()["status"] == "evicted"
    assert sdr.client.get(f"/holds/{elsewhere['id']}").json()["status"] == "held"
    assert len(audit_rows(event_type="calendar.hold.evicted")) == 1


def test_back_to_back_half_open_ranges_both_succeed(sdr, make_agent, calendar):
    peer = make_agent("peer", priority=100, max_priority=100)

    first = created(hold(sdr, calendar["id"], slot(minutes=30)))
    second = created(hold(peer, calendar["id"], slot(minutes=30, offset_minutes=30)))

    assert first["end_time"] == second["start_time"]
    assert first.get("displaced") is None and second.get("displaced") is None
    assert len(rows_of(calendar["id"], status="held")) == 2
