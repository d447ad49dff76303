"""GET /v1/audit: filters, cursor pagination newest first, read-time retention and workspace isolation."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from audit.models import AuditRecord
from tests.audit.aged_rows import insert_aged_audit_row
from tests.helpers import create_calendar, iso, slot
from workspaces.models import Workspace


def listing(persona, **params) -> list[dict]:
    """Every page of GET /v1/audit with these filters."""
    rows: list[dict] = []
    cursor = None
    for _ in range(100):
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = persona.client.get("/audit", params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        rows.extend(page["results"])
        cursor = page["next_cursor"]
        if cursor is None:
            return rows
    raise AssertionError("pagination did not end")


def events(rows: list[dict]) -> list[str]:
    return [row["event_type"] for row in rows]


@pytest.fixture
def history(sdr, exec_assistant):
    """Two agents acting on two acme calendars: holds, an extension, a release, a commit and a conflict."""
    cal_a = create_calendar(sdr, name="A")
    cal_b = create_calendar(sdr, name="B")
    span_1, span_2, span_3 = slot(hours_ahead=30), slot(hours_ahead=50), slot(hours_ahead=60)

    hold = sdr.client.post(f"/calendars/{cal_a['id']}/holds", json=span_1).json()
    extended = sdr.client.post(f"/holds/{hold['id']}/extend", json={"hold_token": hold["hold_token"]})
    other_hold = exec_assistant.client.post(f"/calendars/{cal_b['id']}/holds", json=span_2)
    booking = exec_assistant.client.post(f"/calendars/{cal_a['id']}/commits", json=span_3)
    released = sdr.client.request("DELETE", f"/holds/{hold['id']}", json={"hold_token": hold["hold_token"]})
    conflict = sdr.client.post(f"/calendars/{cal_a['id']}/holds", json=span_3)
    assert [
        extended.status_code,
        other_hold.status_code,
        booking.status_code,
        released.status_code,
        conflict.status_code,
    ] == [200, 201, 201, 200, 409]
    return {
        "cal_a": cal_a["id"],
        "cal_b": cal_b["id"],
        "hold": hold["id"],
        "booking": booking.json()["id"],
        "span_1": span_1,
        "span_2": span_2,
        "span_3": span_3,
    }


ALL_EVENTS = [
    # newest first
    "calendar.hold.rejected",
    "calendar.hold.released",
    "calendar.commit.created",
    "calendar.hold.created",
    "calendar.hold.extended",
    "calendar.hold.created",
    "calendar.created",
    "calendar.created",
]


def test_it_lists_the_workspaces_rows_newest_first(sdr, exec_assistant, history):
    rows = listing(sdr)

    assert events(rows) == ALL_EVENTS
    expected_ids = list(
        AuditRecord.objects.filter(workspace_id=sdr.agent.workspace.pk)
        .order_by("-id")
        .values_list("public_id", flat=True)
    )
    assert [row["id"] for row in rows] == expected_ids
    stamps = [datetime.fromisoformat(row["timestamp"]) for row in rows]
    assert stamps == sorted(stamps, reverse=True)
    assert {row["workspace_id"] for row in rows} == {sdr.agent.workspace.public_id}
    assert all(row["id"].startswith("aud_") for row in rows)
    conflict = rows[0]
    assert conflict["outcome"] == "rejected"
    assert conflict["http_status"] == 409
    assert conflict["failure_reason"] == "slot_conflict"
    assert conflict["agent_id"] == sdr.id
    assert conflict["auth_key_prefix"] == sdr.key.prefix
    assert conflict["conflict_details"]["conflicting"]["agent_id"] == exec_assistant.id
    assert conflict["requested_range"] == history["span_3"]


def test_it_filters_by_event_type(sdr, history):
    rows = listing(sdr, event_type="calendar.hold.created")
    assert events(rows) == ["calendar.hold.created"] * 2


def test_it_filters_by_an_event_family(sdr, history):
    rows = listing(sdr, event_type="calendar.hold.*")
    assert events(rows) == [
        "calendar.hold.rejected",
        "calendar.hold.released",
        "calendar.hold.created",
        "calendar.hold.extended",
        "calendar.hold.created",
    ]
    assert events(listing(sdr, event_type="calendar.*")) == ALL_EVENTS


def test_it_filters_by_agent(sdr, exec_assistant, history):
    rows = listing(sdr, agent=exec_assistant.id)
    assert events(rows) == ["calendar.commit.created", "calendar.hold.created"]
    assert {row["agent_id"] for row in rows} == {exec_assistant.id}


def test_it_filters_by_calendar(sdr, history):
    rows = listing(sdr, calendar=history["cal_b"])
    assert events(rows) == ["calendar.hold.created", "calendar.created"]
    assert {row["calendar"] for row in rows} == {history["cal_b"]}


def test_it_filters_by_outcome(sdr, history):
    rejected = listing(sdr, outcome="rejected")
    success = listing(sdr, outcome="success")
    assert events(rejected) == ["calendar.hold.rejected"]
    assert len(success) == len(ALL_EVENTS) - 1
    assert {row["outcome"] for row in success} == {"success"}


def test_it_filters_by_since_and_until(sdr, history):
    everything = listing(sdr)
    middle = everything[3]["timestamp"]

    newer = listing(sdr, since=middle)
    older = listing(sdr, until=middle)

    assert [row["id"] for row in newer] == [row["id"] for row in everything[:4]]
    assert [row["id"] for row in older] == [row["id"] for row in everything[4:]]
    assert listing(sdr, since=middle, until=everything[2]["timestamp"]) == everything[3:4]


def test_a_range_that_ends_before_it_starts_is_400(sdr, history):
    everything = listing(sdr)
    later, earlier = everything[2]["timestamp"], everything[3]["timestamp"]
    for first, last in (("since", "until"), ("overlaps_start", "overlaps_end")):
        response = sdr.client.get("/audit", params={first: later, last: earlier})
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_range"
        assert response.json()["detail"] == f"{last} must not be before {first}."


def test_it_filters_by_requested_range_overlap(sdr, history):
    span_1 = history["span_1"]
    rows = listing(sdr, overlaps_start=span_1["start_time"], overlaps_end=span_1["end_time"])
    assert events(rows) == ["calendar.hold.released", "calendar.hold.extended", "calendar.hold.created"]
    assert {row["reservation"] for row in rows} == {history["hold"]}

    # Half-open: a window ending exactly where span_1 starts does not overlap it.
    start = datetime.fromisoformat(span_1["start_time"])
    touching = listing(sdr, overlaps_start=iso(start - timedelta(hours=1)), overlaps_end=span_1["start_time"])
    assert touching == []

    open_ended = listing(sdr, overlaps_start=history["span_3"]["start_time"])
    assert events(open_ended) == ["calendar.hold.rejected", "calendar.commit.created"]


def test_it_paginates_with_a_cursor_without_duplicates(sdr, history):
    pages = []
    cursor = None
    while True:
        response = sdr.client.get("/audit", params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        page = response.json()
        pages.append(page["results"])
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert [len(page) for page in pages] == [2, 2, 2, 2]
    ids = [row["id"] for page in pages for row in page]
    assert len(ids) == len(set(ids)) == len(ALL_EVENTS)
    assert ids == [row["id"] for row in listing(sdr)]


def test_it_paginates_a_filtered_listing(sdr, history):
    first = sdr.client.get("/audit", params={"limit": 2, "event_type": "calendar.hold.*"}).json()
    second = sdr.client.get(
        "/audit", params={"limit": 2, "event_type": "calendar.hold.*", "cursor": first["next_cursor"]}
    ).json()
    assert (
        events(first["results"] + second["results"]) == events(listing(sdr, event_type="calendar.hold.*"))[:4]
    )


def test_a_tampered_cursor_is_400(sdr, history):
    cursor = sdr.client.get("/audit", params={"limit": 2}).json()["next_cursor"]
    tampered = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")

    response = sdr.client.get("/audit", params={"limit": 2, "cursor": tampered})

    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "cursor" in response.json()["errors"]


def test_a_cursor_from_another_filter_is_400(sdr, history):
    cursor = sdr.client.get("/audit", params={"limit": 2}).json()["next_cursor"]
    response = sdr.client.get("/audit", params={"limit": 2, "outcome": "success", "cursor": cursor})
    assert response.status_code == 400, response.text
    assert "cursor" in response.json()["errors"]


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "201"},
        {"limit": "ten"},
        {"outcome": "maybe"},
        {"since": "2026-01-01T00:00:00"},
    ],
    ids=["limit-zero", "limit-too-big", "limit-not-int", "bad-outcome", "naive-since"],
)
def test_bad_query_parameters_are_400(sdr, params):
    response = sdr.client.get("/audit", params=params)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"


def test_rows_past_the_retention_window_are_never_returned(sdr, calendar):
    workspace = sdr.agent.workspace
    old = insert_aged_audit_row(workspace_id=workspace.pk, age_days=400, calendar_public_id=calendar["id"])
    recent = insert_aged_audit_row(workspace_id=workspace.pk, age_days=89, calendar_public_id=calendar["id"])

    returned = {row["id"] for row in listing(sdr)}
    by_calendar = {row["id"] for row in listing(sdr, calendar=calendar["id"])}
    with_since = {row["id"] for row in listing(sdr, since="2000-01-01T00:00:00Z")}

    assert recent in returned
    assert old not in returned | by_calendar | with_since
    assert AuditRecord.objects.filter(public_id=old).exists()  # not purged, only hidden

    Workspace.objects.filter(pk=workspace.pk).update(audit_retention_days=30)
    assert recent not in {row["id"] for row in listing(sdr)}


def test_an_outsider_never_sees_acme_rows(sdr, outsider, history):
    acme_ids = set(
        AuditRecord.objects.filter(workspace_id=sdr.agent.workspace.pk).values_list("public_id", flat=True)
    )
    own_calendar = create_calendar(outsider, name="Globex")

    everything = listing(outsider)
    assert events(everything) == ["calendar.created"]
    assert everything[0]["calendar"] == own_calendar["id"]
    assert listing(outsider, agent=sdr.id) == []
    assert listing(outsider, calendar=history["cal_a"]) == []
    # Even acme's own cursor yields nothing of acme's to the outsider.
    acme_cursor = sdr.client.get("/audit", params={"limit": 2}).json()["next_cursor"]
    response = outsider.client.get("/audit", params={"limit": 2, "cursor": acme_cursor})
    assert response.status_code in (200, 400), response.text
    if response.status_code == 200:
        assert not {row["id"] for row in response.json()["results"]} & acme_ids
