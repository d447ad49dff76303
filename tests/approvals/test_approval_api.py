"""POST/GET /v1/approvals and POST /v1/approvals/{id}/cancel over real HTTP."""

from __future__ import annotations

import threading

import pytest

from approvals.models import Approval
from tests.approvals.helpers import created, problem, request_approval
from tests.bookings.helpers import parse
from tests.helpers import audit_rows, create_calendar, slot
from webhooks.models import OutboxEvent


def test_it_creates_a_pending_approval_and_reads_it_back(sdr):
    response = request_approval(sdr, state={"step": 3, "lead": "initech"}, expires_in_seconds=3600)
    approval = created(response)
    assert approval["id"].startswith("appr_")
    assert response.headers["location"] == f"/v1/approvals/{approval['id']}"
    assert approval["status"] == "pending"
    assert approval["summary"] == "Book a demo with Initech"
    assert approval["evidence"] == {"thread": "msg_1"}
    assert approval["state"] == {"step": 3, "lead": "initech"}
    assert approval["agent_id"] == sdr.id
    assert approval["hold_id"] is None and approval["booking_id"] is None
    assert approval["decided_by"] is None and approval["decided_at"] is None and approval["note"] == ""

    fetched = sdr.client.get(f"/approvals/{approval['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == approval

    row = Approval.objects.get(public_id=approval["id"])
    assert 3599 <= (row.expires_at - row.created_at).total_seconds() <= 3600
    (audit,) = audit_rows(event_type="approval.requested")
    assert audit.agent_public_id == sdr.id and audit.details["approval_id"] == approval["id"]
    (event,) = OutboxEvent.objects.filter(event_type="approval.requested")
    assert event.agent_id == sdr.agent.pk and event.payload["approval"]["state"] == approval["state"]


def test_it_defaults_to_a_24_hour_expiry(sdr):
    approval = created(request_approval(sdr))
    row = Approval.objects.get(public_id=approval["id"])
    assert abs((row.expires_at - row.created_at).total_seconds() - 24 * 3600) < 2


def test_it_lists_only_the_agents_own_approvals_newest_first_with_a_cursor(sdr, make_agent):
    colleague = make_agent("colleague")
    ids = [created(request_approval(sdr, summary=f"Request {n}"))["id"] for n in range(3)]
    created(request_approval(colleague))

    first = sdr.client.get("/approvals", params={"limit": 2}).json()
    assert [a["id"] for a in first["results"]] == [ids[2], ids[1]]
    second = sdr.client.get("/approvals", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [a["id"] for a in second["results"]] == [ids[0]]
    assert second["next_cursor"] is None


def test_it_filters_the_list_by_status(sdr):
    keep = created(request_approval(sdr))
    gone = created(request_approval(sdr))
    assert sdr.client.post(f"/approvals/{gone['id']}/cancel").status_code == 200

    pending = sdr.client.get("/approvals", params={"status": "pending"}).json()["results"]
    cancelled = sdr.client.get("/approvals", params={"status": "cancelled"}).json()["results"]
    assert [a["id"] for a in pending] == [keep["id"]]
    assert [a["id"] for a in cancelled] == [gone["id"]]
    problem(sdr.client.get("/approvals", params={"status": "maybe"}), 400, "invalid_request")


def test_it_cancels_a_pending_approval_once(sdr):
    approval = created(request_approval(sdr))
    response = sdr.client.post(f"/approvals/{approval['id']}/cancel")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "cancelled" and body["decided_by"] is None and body["decided_at"] is not None

    again = sdr.client.post(f"/approvals/{approval['id']}/cancel")  # harmless: same answer
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert len(audit_rows(event_type="approval.cancelled")) == 1
    assert OutboxEvent.objects.filter(event_type="approval.cancelled").count() == 1


def test_another_agents_or_workspaces_approval_is_not_found(sdr, make_agent, outsider):
    colleague = make_agent("colleague")
    approval = created(request_approval(sdr))
    for stranger in (colleague, outsider):
        problem(stranger.client.get(f"/approvals/{approval['id']}"), 404, "not_found")
        problem(stranger.client.post(f"/approvals/{approval['id']}/cancel"), 404, "not_found")
        assert stranger.client.get("/approvals").json()["results"] == []
    assert Approval.objects.get(public_id=approval["id"]).status == "pending"


def test_it_refuses_a_summary_with_a_line_break_or_over_200_characters(sdr):
    for summary in ("Book a demo\nand wire $10k", "Book a demo\r", "x" * 201, ""):
        body = problem(request_approval(sdr, summary=summary), 400, "invalid_request")
        assert "summary" in body["errors"]
    created(request_approval(sdr, summary="x" * 200))
    assert Approval.objects.count() == 1


def test_it_refuses_unknown_fields_bad_evidence_and_out_of_range_expiry(sdr):
    assert "decision" in problem(request_approval(sdr, decision="approve"), 400, "invalid_request")["errors"]
    assert "evidence" in problem(request_approval(sdr, evidence=["a"]), 400, "invalid_request")["errors"]
    big = {"blob": "x" * (64 * 1024)}
    assert "evidence" in problem(request_approval(sdr, evidence=big), 400, "invalid_request")["errors"]
    for seconds in (59, 30 * 86400 + 1):
        body = problem(request_approval(sdr, expires_in_seconds=seconds), 400, "invalid_request")
        assert "expires_in_seconds" in body["errors"]
    created(request_approval(sdr, expires_in_seconds=60))
    assert Approval.objects.count() == 1


def test_it_needs_approvals_scopes_and_names_the_missing_one(make_agent):
    reader = make_agent("reader", scopes=["approvals:read"])
    writer = make_agent("writer", scopes=["approvals:write"])
    body = problem(request_approval(reader), 403, "insufficient_scope")
    assert body["required_scope"] == "approvals:write"
    approval = created(request_approval(writer))
    assert problem(writer.client.get("/approvals"), 403, "insufficient_scope")["required_scope"] == (
        "approvals:read"
    )
    assert problem(writer.client.get(f"/approvals/{approval['id']}"), 403, "insufficient_scope")
    assert reader.client.get("/approvals").status_code == 200
    assert problem(reader.client.post(f"/approvals/{approval['id']}/cancel"), 403, "insufficient_scope")
    assert audit_rows(event_type="approval.rejected", failure_reason="insufficient_scope")


def test_an_idempotency_key_replays_the_original_approval(sdr):
    headers = {"Idempotency-Key": "appr-once"}
    body = {"summary": "Send the contract", "evidence": {}}
    first = sdr.client.post("/approvals", json=body, headers=headers)
    second = sdr.client.post("/approvals", json=body, headers=headers)
    assert first.status_code == second.status_code == 201
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json()["id"] == first.json()["id"]
    assert Approval.objects.count() == 1


def test_a_hold_must_exist_belong_to_the_agent_and_be_live(sdr, make_agent):
    colleague = make_agent("colleague")
    cal = create_calendar(sdr)
    hold = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=40)).json()

    problem(request_approval(sdr, hold_id="hld_doesnotexist"), 404, "not_found")
    problem(request_approval(colleague, hold_id=hold["id"]), 403, "not_owner")
    sdr.client.request("DELETE", f"/holds/{hold['id']}", json={"hold_token": hold["hold_token"]})
    problem(request_approval(sdr, hold_id=hold["id"]), 409, "hold_released")
    assert Approval.objects.count() == 0


def test_a_hold_gets_one_pending_approval_at_a_time(sdr):
    cal = create_calendar(sdr)
    hold = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=41)).json()
    first = created(request_approval(sdr, hold_id=hold["id"], expires_in_seconds=600))
    body = problem(request_approval(sdr, hold_id=hold["id"], expires_in_seconds=3600), 409, "approval_exists")
    assert body["approval_id"] == first["id"] and body["hold_id"] == hold["id"]
    # The refused request did not move the first approval's pin on the hold.
    assert parse(sdr.client.get(f"/holds/{hold['id']}").json()["expires_at"]) == parse(first["expires_at"])

    sdr.client.post(f"/approvals/{first['id']}/cancel")
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "released"


@pytest.mark.concurrency
def test_two_requests_racing_for_one_hold_get_one_approval_and_the_winners_pin(sdr):
    cal = create_calendar(sdr)
    hold = sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=42)).json()
    barrier = threading.Barrier(2)
    responses = {}

    def race(seconds):
        with sdr.new_client() as client:
            barrier.wait()
            body = {"summary": "Race", "evidence": {}, "hold_id": hold["id"], "expires_in_seconds": seconds}
            responses[seconds] = client.post("/approvals", json=body)

    threads = [threading.Thread(target=race, args=(seconds,)) for seconds in (600, 86400)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    statuses = sorted(r.status_code for r in responses.values())
    assert statuses == [201, 409], {s: r.text for s, r in responses.items()}
    (winner,) = (r.json() for r in responses.values() if r.status_code == 201)
    (loser,) = (r.json() for r in responses.values() if r.status_code == 409)
    assert loser["error"] == "approval_exists" and loser["approval_id"] == winner["id"]
    assert parse(sdr.client.get(f"/holds/{hold['id']}").json()["expires_at"]) == parse(winner["expires_at"])
