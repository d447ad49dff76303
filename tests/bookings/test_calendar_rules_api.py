"""Calendar rules through the API: set, shown back normalised, validated as a whole, changed and cleared."""

from __future__ import annotations

from tests.bookings.helpers import problem
from tests.helpers import create_calendar

WEEKDAYS = {"mon": [["09:00", "12:30"], ["13:30", "17:00"]], "fri": [["09:00", "13:00"]]}


def test_rules_are_set_and_shown_back_with_every_weekday_named(sdr):
    calendar = create_calendar(
        sdr,
        name="Berlin AE",
        timezone="Europe/Berlin",
        working_hours=WEEKDAYS,
        date_overrides={"2026-12-24": [], "2026-12-31": [["10:00", "14:00"]]},
        buffer_before_minutes=5,
        buffer_after_minutes=15,
        min_notice_minutes=120,
    )

    shown = sdr.client.get(f"/calendars/{calendar['id']}").json()
    assert shown["working_hours"] == {
        "mon": [["09:00", "12:30"], ["13:30", "17:00"]],
        "tue": [],
        "wed": [],
        "thu": [],
        "fri": [["09:00", "13:00"]],
        "sat": [],
        "sun": [],
    }
    assert shown["date_overrides"] == {"2026-12-24": [], "2026-12-31": [["10:00", "14:00"]]}
    assert (shown["buffer_before_minutes"], shown["buffer_after_minutes"], shown["min_notice_minutes"]) == (
        5,
        15,
        120,
    )


def test_a_calendar_without_rules_is_open_at_any_time(sdr):
    shown = create_calendar(sdr, name="Room")
    assert shown["working_hours"] is None and shown["date_overrides"] == {}
    assert shown["buffer_before_minutes"] == shown["buffer_after_minutes"] == shown["min_notice_minutes"] == 0


def test_every_problem_in_the_rules_is_named_by_its_path_in_one_answer(sdr):
    response = sdr.client.post(
        "/calendars",
        json={
            "name": "Bad",
            "working_hours": {"mon": [["9:00", "17:00"]], "tue": [["17:00", "09:00"]], "funday": []},
            "date_overrides": {"2026-02-30": []},
        },
    )
    body = problem(response, 400, "invalid_request")
    assert set(body["errors"]) >= {"working_hours.mon[0]", "working_hours.tue[0]", "working_hours.funday"}
    assert any(key.startswith("date_overrides") for key in body["errors"])
    assert sdr.client.get("/calendars").json()["results"] == []  # nothing was created


def test_rules_change_and_clear_by_patch(sdr):
    calendar = create_calendar(sdr, name="AE", working_hours=WEEKDAYS, min_notice_minutes=60)

    changed = sdr.client.patch(
        f"/calendars/{calendar['id']}", json={"working_hours": None, "buffer_after_minutes": 10}
    )

    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["working_hours"] is None and body["buffer_after_minutes"] == 10
    assert body["min_notice_minutes"] == 60  # untouched


def test_out_of_bounds_buffers_and_notice_are_refused(sdr):
    for field, value in (
        ("buffer_before_minutes", 721),
        ("buffer_after_minutes", -1),
        ("min_notice_minutes", 129601),
    ):
        response = sdr.client.post("/calendars", json={"name": "X", field: value})
        assert field in problem(response, 400, "invalid_request")["errors"], field
