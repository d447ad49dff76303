"""A hold's life after creation: read back (recovery), heartbeat extends, release by body or query string."""

from __future__ import annotations

import time

from tests.bookings.helpers import commit_hold, created, hold, parse, problem, rows_of
from tests.helpers import audit_rows, slot


def _extend(persona, held, ttl_seconds):
    return persona.client.post(
        f"/holds/{held['id']}/extend", json={"hold_token": held["hold_token"], "ttl_seconds": ttl_seconds}
    )


def _release(persona, held, hold_token=None):
    return persona.client.request(
        "DELETE", f"/holds/{held['id']}", json={"hold_token": hold_token or held["hold_token"]}
    )


def test_a_restarted_agent_recovers_its_hold_by_id(sdr, calendar):
    span = slot()
    held = created(hold(sdr, calendar["id"], span, title="Intro call", metadata={"lead": 42}))
    assert held["id"].startswith("hld_")
    assert held["hold_token"]

    recovered = sdr.client.get(f"/holds/{held['id']}").json()

    assert recovered["status"] == "held"
    assert recovered["calendar"] == calendar["id"]
    assert recovered["fencing_token"] == held["fencing_token"]
    assert recovered["expires_at"] == held["expires_at"]
    assert recovered["title"] == "Intro call"
    assert recovered["metadata"] == {"lead": 42}
    assert "hold_token" not in recovered  # shown once, never stored raw
    assert parse(recovered["start_time"]) == parse(span["start_time"])


def test_extend_pushes_expires_at_later(sdr, calendar):
    held = created(hold(sdr, calendar["id"], slot(), ttl_seconds=5))

    extended = _extend(sdr, held, 600)

    assert extended.status_code == 200, extended.text
    body = extended.json()
    assert body["status"] == "held"
    assert parse(body["expires_at"]) > parse(held["expires_at"])
    assert sdr.client.get(f"/holds/{held['id']}").json()["expires_at"] == body["expires_at"]
    extended_rows = audit_rows(event_type="calendar.hold.extended", reservation_public_id=held["id"])
    assert len(extended_rows) == 1
    assert extended_rows[0].details["ttl_seconds"] == 600


def test_heartbeats_keep_a_short_hold_alive_past_its_ttl(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    held = created(hold(sdr, calendar["id"], span, ttl_seconds=1))
    deadline = time.monotonic() + 1.5  # half again the original one-second TTL

    while time.monotonic() < deadline:
        assert _extend(sdr, held, 1).status_code == 200
        time.sleep(0.2)

    assert sdr.client.get(f"/holds/{held['id']}").json()["status"] == "held"
    problem(hold(rival, calendar["id"], span), 409, "slot_conflict")


def test_it_releases_a_hold_with_the_token_in_the_body(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    held = created(hold(sdr, calendar["id"], span))

    response = _release(sdr, held)

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "released"
    assert sdr.client.get(f"/holds/{held['id']}").json()["status"] == "released"
    assert [r.status for r in rows_of(calendar["id"])] == ["released"]
    assert len(audit_rows(event_type="calendar.hold.released", reservation_public_id=held["id"])) == 1
    created(hold(rival, calendar["id"], span))  # the slot is free again


def test_it_releases_a_hold_with_the_token_in_the_query_string(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100, max_priority=100)
    span = slot()
    held = created(hold(sdr, calendar["id"], span))

    response = sdr.client.delete(f"/holds/{held['id']}", params={"hold_token": held["hold_token"]})

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "released"
    created(hold(rival, calendar["id"], span))


def test_releasing_twice_is_harmless(sdr, calendar):
    held = created(hold(sdr, calendar["id"], slot()))
    assert _release(sdr, held).status_code == 200

    again = _release(sdr, held)

    assert again.status_code == 200, again.text
    assert again.json()["status"] == "released"
    assert len(audit_rows(event_type="calendar.hold.released", reservation_public_id=held["id"])) == 1


def test_it_refuses_a_wrong_hold_token(sdr, calendar):
    held = created(hold(sdr, calendar["id"], slot()))

    release = _release(sdr, held, hold_token="hlt_not-the-right-one")
    extend = _extend(sdr, {**held, "hold_token": "hlt_wrong"}, 600)

    problem(release, 403, "hold_token_mismatch")
    problem(extend, 403, "hold_token_mismatch")
    after = sdr.client.get(f"/holds/{held['id']}").json()
    assert (after["status"], after["expires_at"]) == ("held", held["expires_at"])
    rejected = audit_rows(reservation_public_id=held["id"], outcome="rejected")
    assert sorted((r.event_type, r.failure_reason) for r in rejected) == [
        ("calendar.hold.extend.rejected", "hold_token_mismatch"),
        ("calendar.hold.release.rejected", "hold_token_mismatch"),
    ]


def test_it_refuses_to_commit_a_released_hold(sdr, calendar):
    held = created(hold(sdr, calendar["id"], slot()))
    assert _release(sdr, held).status_code == 200

    problem(commit_hold(sdr, calendar["id"], held["hold_token"]), 409, "hold_released")

    assert rows_of(calendar["id"], status="committed") == []


def test_a_dead_hold_error_keeps_the_http_status_in_the_problem_body(sdr, calendar):
    """RFC 9457: the problem's `status` member is the HTTP status code, not the hold's state."""
    released = created(hold(sdr, calendar["id"], slot()))
    assert _release(sdr, released).status_code == 200
    committed = created(hold(sdr, calendar["id"], slot(offset_minutes=60)))
    created(commit_hold(sdr, calendar["id"], committed["hold_token"]))

    after_release = commit_hold(sdr, calendar["id"], released["hold_token"])
    after_commit = commit_hold(sdr, calendar["id"], committed["hold_token"])

    assert after_release.status_code == after_commit.status_code == 409
    assert after_release.json()["status"] == 409, after_release.json()
    assert after_commit.json()["status"] == 409, after_commit.json()


def test_another_agent_with_the_hold_token_can_neither_extend_nor_release_it(sdr, make_agent, calendar):
    teammate = make_agent("teammate", priority=100, max_priority=100)
    held = created(hold(sdr, calendar["id"], slot()))
    token = {"hold_token": held["hold_token"]}

    problem(
        teammate.client.post(f"/holds/{held['id']}/extend", json={**token, "ttl_seconds": 600}),
        403,
        "not_owner",
    )
    problem(teammate.client.request("DELETE", f"/holds/{held['id']}", json=token), 403, "not_owner")
    problem(teammate.client.delete(f"/holds/{held['id']}", params=token), 403, "not_owner")

    now = sdr.client.get(f"/holds/{held['id']}").json()
    assert (now["status"], now["expires_at"]) == ("held", held["expires_at"])
    rejected = audit_rows(outcome="rejected", failure_reason="not_owner")
    assert [r.event_type for r in rejected] == [
        "calendar.hold.extend.rejected",
        "calendar.hold.release.rejected",
        "calendar.hold.release.rejected",
    ]
    assert {r.agent_public_id for r in rejected} == {teammate.id}
