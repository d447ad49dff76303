"""Every rejected API request writes exactly one audit row: outcome `rejected`, status and reason."""

from __future__ import annotations

from typing import Any

import httpx

from audit.models import AuditRecord
from tests.helpers import slot
from workspaces.keys import KEY_PREFIX, LOOKUP_PREFIX_LENGTH


def new_rows(after_id: int) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(id__gt=after_id).order_by("id"))


def last_id() -> int:
    row = AuditRecord.objects.order_by("-id").first()
    return row.id if row else 0


def test_every_rejected_request_writes_exactly_one_rejected_audit_row(
    sdr, exec_assistant, make_agent, anonymous, calendar
):
    # One test over every kind of refusal (not a parametrisation): each live-server test pays a flush.
    reader = make_agent("reader", scopes=["calendars:read"])
    blocker = exec_assistant.client.post(f"/calendars/{calendar['id']}/commits", json=slot(hours_ahead=30))
    hold = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=40)).json()
    keyed = sdr.client.post(
        f"/calendars/{calendar['id']}/holds",
        json=slot(hours_ahead=50),
        headers={"Idempotency-Key": "used-once"},
    )
    assert blocker.status_code == keyed.status_code == 201
    forged = sdr.raw_key[: len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH] + "D" * 43
    holds = f"/calendars/{calendar['id']}/holds"
    naive = {k: v.removesuffix("Z") for k, v in slot(hours_ahead=60).items()}
    big = {**slot(hours_ahead=60), "title": "x" * 300_000}
    json_type = {"Content-Type": "application/json"}
    reused_key = {"Idempotency-Key": "used-once"}
    hold_event, extend_event, cancel_event = (
        "calendar.hold.rejected", "calendar.hold.extend.rejected", "calendar.booking.cancel.rejected"
    )  # fmt: skip
    # (client, "METHOD path", request keyword arguments, "status failure_reason event_type")
    cases: list[tuple[httpx.Client, str, dict[str, Any], str]] = [
        (anonymous, "GET /calendars", {}, "401 unauthenticated auth.rejected"),
        (anonymous, "GET /calendars", {"headers": {"Authorization": f"Bearer {forged}"}},
         "401 unauthenticated auth.rejected"),
        (reader.client, f"POST {holds}", {"json": slot(hours_ahead=60)},
         f"403 insufficient_scope {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": {**slot(hours_ahead=60), "priority": 900}},
         f"403 priority_not_allowed {hold_event}"),
        (sdr.client, "POST /calendars/cal_nope/holds", {"json": slot(hours_ahead=60)},
         f"404 not_found {hold_event}"),
        (sdr.client, "GET /holds/hld_nope", {}, f"404 not_found {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": slot(hours_ahead=30)}, f"409 slot_conflict {hold_event}"),
        (sdr.client, f"POST /holds/{hold['id']}/extend", {"json": {"hold_token": "wrong"}},
         f"403 hold_token_mismatch {extend_event}"),
        (sdr.client, f"DELETE /bookings/{blocker.json()['id']}", {}, f"403 not_owner {cancel_event}"),
        (sdr.client, f"POST {holds}", {"json": slot(hours_ahead=60), "headers": {"If-Match": '"999"'}},
         f"412 precondition_failed {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": slot(hours_ahead=60, minutes=600)},
         f"422 booking_too_long {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": slot(hours_ahead=61), "headers": reused_key},
         f"422 idempotency_key_reused {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": naive}, f"400 invalid_range {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": slot(hours_ahead=-5)}, f"400 invalid_range {hold_event}"),
        (sdr.client, f"POST {holds}", {"content": b"{oops", "headers": json_type},
         f"400 malformed_json {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": {**slot(hours_ahead=60), "ttl_second": 5}},
         f"400 invalid_request {hold_event}"),
        (sdr.client, f"POST {holds}", {"json": big}, f"413 payload_too_large {hold_event}"),
        (sdr.client, "GET /audit", {"params": {"limit": "0"}}, "400 invalid_request audit.read.rejected"),
    ]  # fmt: skip
    agent_of = {anonymous: "", reader.client: reader.id, sdr.client: sdr.id}

    wrong = []
    for client, request, kwargs, expectation in cases:
        method, path = request.split(" ", 1)
        status, reason, event_type = expectation.split()
        before = last_id()
        response = client.request(method, path, **kwargs)
        rows = new_rows(before)
        observed = [
            (r.outcome, r.http_status, r.failure_reason, r.event_type, r.agent_public_id) for r in rows
        ]
        expected = [("rejected", int(status), reason, event_type, agent_of[client])]
        same_request = {r.request_id for r in rows} == {response.headers["X-Request-ID"]}
        if response.status_code != int(status) or observed != expected or not same_request:
            wrong.append((request, response.status_code, response.text[:200], observed))
    assert wrong == []


def test_a_rejected_commit_records_the_requested_range_and_conflict(sdr, exec_assistant, calendar):
    span = slot(hours_ahead=30)
    assert exec_assistant.client.post(f"/calendars/{calendar['id']}/commits", json=span).status_code == 201

    response = sdr.client.post(f"/calendars/{calendar['id']}/commits", json=span)

    assert response.status_code == 409
    (row,) = AuditRecord.objects.filter(event_type="calendar.commit.rejected")
    assert row.calendar_public_id == calendar["id"]
    assert row.auth_key_prefix == sdr.key.prefix
    assert row.requested_start is not None and row.requested_end is not None
    assert row.conflict_details is not None
    assert (
        row.requested_start.isoformat().replace("+00:00", "Z"),
        row.requested_end.isoformat().replace("+00:00", "Z"),
    ) == (span["start_time"], span["end_time"])
    assert row.conflict_details["conflicting"]["agent_id"] == exec_assistant.id
    assert row.conflict_details["caller_priority"] == 100
    assert row.conflict_details["alternatives"] == response.json()["alternatives"]


def test_a_successful_request_writes_no_rejected_row(sdr, calendar):
    before = last_id()
    assert sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30)).status_code == 201
    assert [(r.event_type, r.outcome) for r in new_rows(before)] == [("calendar.hold.created", "success")]
