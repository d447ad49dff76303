"""Span bounds: too long (minutes or buckets) is 422 booking_too_long; malformed or past is 400 invalid_range.

Either way nothing is written except the one audit row for the rejected attempt.
"""

from __future__ import annotations

import pytest

from tests.bookings.helpers import commit, created, hold, problem, rows_of
from tests.helpers import audit_rows, create_calendar, slot


def _audit_for(calendar_id: str) -> list:
    return [r for r in audit_rows(calendar_public_id=calendar_id) if r.event_type != "calendar.created"]


@pytest.mark.parametrize(
    ("operation", "rejected_event"), [(hold, "calendar.hold.rejected"), (commit, "calendar.commit.rejected")]
)
def test_it_rejects_a_3000_minute_span_as_booking_too_long(sdr, calendar, operation, rejected_event):
    response = operation(sdr, calendar["id"], slot(minutes=3000))

    body = problem(response, 422, "booking_too_long")
    assert body["max_allowed_minutes"] == 480
    assert body["requested_minutes"] == 3000
    assert body["max_buckets_allowed"] == 99
    assert rows_of(calendar["id"]) == []
    audit = _audit_for(calendar["id"])
    assert [(r.event_type, r.outcome, r.failure_reason) for r in audit] == [
        (rejected_event, "rejected", "booking_too_long")
    ]
    assert audit[0].http_status == 422
    assert audit[0].agent_public_id == sdr.id


def test_it_accepts_exactly_the_calendars_maximum(sdr, calendar):
    booking = created(commit(sdr, calendar["id"], slot(minutes=480)))

    assert booking["status"] == "committed"


def test_it_rejects_a_span_touching_more_than_99_buckets(sdr):
    cal = create_calendar(sdr, slot_minutes=5, max_booking_minutes=10080)

    body = problem(hold(sdr, cal["id"], slot(minutes=500)), 422, "booking_too_long")

    assert body["requested_minutes"] == 500
    assert body["max_buckets_allowed"] == 99
    assert body["max_allowed_minutes"] == 99 * 5
    assert rows_of(cal["id"]) == []
    assert [(r.event_type, r.failure_reason) for r in _audit_for(cal["id"])] == [
        ("calendar.hold.rejected", "booking_too_long")
    ]


def test_it_counts_the_buckets_a_span_touches_not_only_its_minutes(sdr):
    cal = create_calendar(sdr, slot_minutes=5, max_booking_minutes=10080)

    # 495 grid-aligned minutes touch exactly 99 buckets; 494 minutes starting at :03 touch 100.
    aligned = hold(sdr, cal["id"], slot(minutes=99 * 5))
    straddling = hold(sdr, cal["id"], slot(minutes=494, offset_minutes=3, hours_ahead=48))

    assert created(aligned)["status"] == "held"
    assert problem(straddling, 422, "booking_too_long")["requested_minutes"] == 494
    assert len(rows_of(cal["id"])) == 1


def test_it_rejects_a_malformed_or_past_span_as_invalid_range(sdr, calendar):
    span = slot()
    empty = {"start_time": span["start_time"], "end_time": span["start_time"]}
    backwards = {"start_time": span["end_time"], "end_time": span["start_time"]}
    naive = {name: value.removesuffix("Z") for name, value in span.items()}

    responses = [
        hold(sdr, calendar["id"], empty),
        commit(sdr, calendar["id"], backwards),
        hold(sdr, calendar["id"], naive),
        hold(sdr, calendar["id"], slot(hours_ahead=-3)),
    ]

    for response in responses:
        problem(response, 400, "invalid_range")
    assert "server_time" in responses[-1].json()  # "past" is judged by the server's clock
    assert rows_of(calendar["id"]) == []
    assert [r.failure_reason for r in _audit_for(calendar["id"])] == ["invalid_range"] * 4
