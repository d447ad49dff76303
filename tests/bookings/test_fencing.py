"""Fencing tokens: strictly increasing per calendar; a commit presenting an older one is refused."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest

from tests.bookings.helpers import commit_hold, created, hold, problem, rows_of
from tests.helpers import audit_rows, create_calendar, overlapping_live_pairs, slot


def test_fencing_tokens_strictly_increase_per_calendar(sdr):
    first_cal = create_calendar(sdr)
    second_cal = create_calendar(sdr)
    tokens: dict[str, list[int]] = {first_cal["id"]: [], second_cal["id"]: []}

    for i in range(4):
        for cal in (first_cal, second_cal):
            held = created(hold(sdr, cal["id"], slot(minutes=30, offset_minutes=60 * i)))
            tokens[cal["id"]].append(held["fencing_token"])

    for cal_tokens in tokens.values():
        assert cal_tokens == sorted(cal_tokens)
        assert len(set(cal_tokens)) == len(cal_tokens)


def test_a_released_and_reheld_range_gets_a_newer_token(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    first = created(hold(sdr, calendar["id"], span))
    released = sdr.client.request("DELETE", f"/holds/{first['id']}", json={"hold_token": first["hold_token"]})
    assert released.status_code == 200, released.text

    second = created(hold(rival, calendar["id"], span))

    assert second["fencing_token"] > first["fencing_token"]


@pytest.mark.concurrency
def test_concurrent_holds_on_one_calendar_get_distinct_tokens(make_agent):
    agents = [make_agent(f"fencer-{i}", priority=100) for i in range(8)]
    cal = create_calendar(agents[0])
    barrier = Barrier(len(agents))

    def hold_own_slot(index):
        persona = agents[index]
        with persona.new_client() as client:
            barrier.wait()
            return client.post(
                f"/calendars/{cal['id']}/holds", json=slot(minutes=30, offset_minutes=30 * index)
            )

    with ThreadPoolExecutor(max_workers=len(agents)) as pool:
        responses = list(pool.map(hold_own_slot, range(len(agents))))

    assert [r.status_code for r in responses] == [201] * len(agents), [r.text for r in responses]
    tokens = [r.json()["fencing_token"] for r in responses]
    assert len(set(tokens)) == len(tokens)
    assert sorted(r.fencing_token for r in rows_of(cal["id"])) == sorted(tokens)
    assert overlapping_live_pairs(cal["id"]) == []


def test_it_refuses_an_older_fencing_token_and_accepts_the_holds_own(sdr, calendar):
    span = slot()
    earlier = created(hold(sdr, calendar["id"], span))
    released = sdr.client.request(
        "DELETE", f"/holds/{earlier['id']}", json={"hold_token": earlier["hold_token"]}
    )
    assert released.status_code == 200, released.text
    current = created(hold(sdr, calendar["id"], span))

    # An agent that kept the token of its earlier hold on this range presents it.
    stale = commit_hold(sdr, calendar["id"], current["hold_token"], fencing_token=earlier["fencing_token"])

    body = problem(stale, 409, "stale_fencing_token")
    assert body["presented_fencing_token"] == earlier["fencing_token"]
    assert body["current_fencing_token"] == current["fencing_token"]
    assert body["detail"].endswith(
        f"is stale for hold {current['id']}: {current['fencing_token']} was issued since."
    )
    # A token from nowhere (never issued) is refused the same way, and said to be what it is.
    made_up = problem(
        commit_hold(sdr, calendar["id"], current["hold_token"], fencing_token=current["fencing_token"] + 100),
        409,
        "stale_fencing_token",
    )
    assert made_up["detail"] == (
        f"Fencing token {current['fencing_token'] + 100} was never issued for hold {current['id']}; "
        f"its own is {current['fencing_token']}."
    )
    assert sdr.client.get(f"/holds/{current['id']}").json()["status"] == "held"
    assert rows_of(calendar["id"], status="committed") == []
    rejected = audit_rows(event_type="calendar.commit.rejected", calendar_public_id=calendar["id"])
    assert [r.failure_reason for r in rejected] == ["stale_fencing_token"] * 2

    booking = created(
        commit_hold(sdr, calendar["id"], current["hold_token"], fencing_token=current["fencing_token"])
    )

    assert booking["fencing_token"] == current["fencing_token"]
    assert booking["hold_id"] == current["id"]
