"""POST /availability/search: the common free time of several calendars, over real HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bookings.models import BusyBlock, Calendar
from tests.bookings.helpers import commit, created, hold, parse, problem, wait_for_hold_status
from tests.helpers import Persona, create_calendar, iso, slot


def search(persona: Persona, **body: Any) -> Any:
    return persona.client.post("/availability/search", json=body)


def window(hours: int = 4, *, hours_ahead: int = 24) -> dict[str, str]:
    span = slot(hours_ahead=hours_ahead, minutes=hours * 60)
    return {"start": span["start_time"], "end": span["end_time"]}


def busy_block(calendar_id: str, span: dict[str, str]) -> None:
    BusyBlock.objects.create(
        calendar=Calendar.objects.get(public_id=calendar_id),
        source="caldav",
        connection_id=1,
        event_key=f"/{span['start_time']}.ics",
        start_time=parse(span["start_time"]),
        end_time=parse(span["end_time"]),
    )


def starts(body: dict[str, Any]) -> list[str]:
    return [c["start_time"] for c in body["candidates"]]


def at(offset_minutes: int) -> str:
    return slot(offset_minutes=offset_minutes)["start_time"]


def three_calendars(persona: Persona) -> list[str]:
    return [create_calendar(persona, name=f"Person {n}")["id"] for n in range(3)]


def test_it_answers_exactly_the_grid_slots_free_on_every_calendar(sdr, exec_assistant):
    a, b, c = three_calendars(sdr)
    created(hold(sdr, a, slot(minutes=30, offset_minutes=0)))  # 00:00-00:30
    created(commit(exec_assistant, b, slot(minutes=60, offset_minutes=60)))  # 01:00-02:00
    busy_block(c, slot(minutes=30, offset_minutes=150))  # 02:30-03:00 upstream

    response = search(sdr, calendars=[a, b, c], duration_minutes=30, limit=50, **window(4))

    assert response.status_code == 200, response.text
    body = response.json()
    # 30-minute grid over 00:00-04:00: everything but 00:00, 01:00, 01:30 and 02:30.
    assert starts(body) == [at(m) for m in (30, 120, 180, 210)]
    assert all(x["calendars"] == [a, b, c] and x["optional_free"] == [] for x in body["candidates"])
    assert body["candidates"][0]["end_time"] == at(60)
    assert body["truncated"] is False and "reasons" not in body
    assert body["searched"] == window(4)


def test_an_hour_fits_only_where_every_calendar_is_free_for_all_of_it(sdr):
    a, b, c = three_calendars(sdr)
    created(hold(sdr, a, slot(minutes=30, offset_minutes=30)))
    busy_block(b, slot(minutes=30, offset_minutes=120))
    busy_block(c, slot(minutes=30, offset_minutes=180))

    body = search(sdr, calendars=[a, b, c], duration_minutes=60, **window(4)).json()

    # Free on all: 00:00-00:30, 01:00-02:00, 02:30-03:00, 03:30-04:00; an hour fits only at 01:00.
    assert starts(body) == [at(60)]


def test_optional_calendars_are_reported_and_most_optional_puts_the_fullest_first(sdr):
    a, b, opt1, opt2 = [create_calendar(sdr, name=f"P{n}")["id"] for n in range(4)]
    busy_block(b, slot(minutes=30, offset_minutes=0))
    busy_block(opt1, slot(minutes=60, offset_minutes=30))  # busy 00:30-01:30
    busy_block(opt2, slot(minutes=30, offset_minutes=30))  # busy 00:30-01:00
    body = {"calendars": [a, b], "optional_calendars": [opt1, opt2], "duration_minutes": 30, **window(2)}

    earliest = search(sdr, **body).json()
    fullest = search(sdr, **body, order="most_optional").json()
    at_least_one = search(sdr, **body, min_optional=1).json()

    assert [(c["start_time"], c["optional_free"]) for c in earliest["candidates"]] == [
        (at(30), []),
        (at(60), [opt2]),
        (at(90), [opt1, opt2]),
    ]
    assert starts(fullest) == [at(90), at(60), at(30)]
    assert starts(at_least_one) == [at(60), at(90)]
    assert set(earliest["versions"]) == {a, b, opt1, opt2}


def test_lapsed_holds_do_not_block(sdr):
    a, b, _ = three_calendars(sdr)
    lapsed = created(hold(sdr, a, slot(minutes=30), ttl_seconds=1))
    wait_for_hold_status(sdr, lapsed["id"], "expired")
    # A second lapsed hold nothing has expired yet: still "held" in its row, but it blocks nothing.
    pending = created(hold(sdr, b, slot(minutes=30), ttl_seconds=1))
    lapses_in = parse(pending["expires_at"]) - datetime.now(UTC) + timedelta(milliseconds=200)
    time.sleep(max(lapses_in.total_seconds(), 0))

    body = search(sdr, calendars=[a, b], duration_minutes=30, limit=1, **window(1)).json()

    assert starts(body) == [at(0)]


def test_versions_are_each_calendars_etag(sdr):
    a, b, c = three_calendars(sdr)
    created(hold(sdr, a, slot(minutes=30)))
    created(commit(sdr, b, slot(minutes=30, offset_minutes=60)))

    body = search(sdr, calendars=[a, b], optional_calendars=[c], duration_minutes=30, **window(2)).json()

    for calendar_id in (a, b, c):
        etag = sdr.client.get(
            f"/calendars/{calendar_id}/availability",
            params={"start": window(2)["start"], "end": window(2)["end"]},
        ).headers["ETag"]
        assert etag == f'"{body["versions"][calendar_id]}"'


def test_another_workspaces_calendar_is_not_found(sdr, outsider):
    mine = create_calendar(sdr)["id"]
    theirs = create_calendar(outsider)["id"]

    for field in ("calendars", "optional_calendars"):
        extra = (
            {"calendars": [mine, theirs]} if field == "calendars" else {"calendars": [mine], field: [theirs]}
        )
        body = problem(search(sdr, duration_minutes=30, **window(), **extra), 404, "not_found")
        assert body["missing_calendars"] == [theirs]


def test_bad_bodies_are_refused_with_the_field_named(sdr, calendar):
    cal = calendar["id"]
    cases = {
        "unknown": {"calendars": [cal], "duration_minutes": 30, "colour": "red", **window()},
        "none": {"calendars": [], "duration_minutes": 30, **window()},
        "repeated": {"calendars": [cal], "optional_calendars": [cal], "duration_minutes": 30, **window()},
        "too_many_optional": {"calendars": [cal], "min_optional": 1, "duration_minutes": 30, **window()},
        "limit": {"calendars": [cal], "duration_minutes": 30, "limit": 51, **window()},
        "order": {"calendars": [cal], "duration_minutes": 30, "order": "latest", **window()},
    }
    for name, body in cases.items():
        assert search(sdr, **body).status_code == 400, name
    naive = {
        "calendars": [cal],
        "duration_minutes": 30,
        "start": "2030-01-01T00:00:00",
        "end": window()["end"],
    }
    problem(search(sdr, **naive), 400, "invalid_range")
    backwards = {
        "calendars": [cal],
        "duration_minutes": 30,
        "start": window()["end"],
        "end": window()["start"],
    }
    problem(search(sdr, **backwards), 400, "invalid_range")
    too_wide = {"calendars": [cal], "duration_minutes": 30, **window(24 * 63)}
    problem(search(sdr, **too_wide), 400, "invalid_range")


def test_a_duration_longer_than_a_calendar_allows_is_booking_too_long(sdr):
    short = create_calendar(sdr, max_booking_minutes=60)["id"]
    roomy = create_calendar(sdr)["id"]

    body = problem(
        search(sdr, calendars=[roomy, short], duration_minutes=90, **window()), 422, "booking_too_long"
    )

    assert body["calendar"] == short


def test_empty_answers_say_why(sdr):
    a, b, _ = three_calendars(sdr)
    busy_block(a, slot(minutes=60))
    busy_block(b, slot(minutes=60, offset_minutes=60))
    past = {
        "start": iso(datetime.now(UTC) - timedelta(hours=3)),
        "end": iso(datetime.now(UTC) - timedelta(hours=1)),
    }

    in_the_past = search(sdr, calendars=[a, b], duration_minutes=30, **past)
    no_common = search(sdr, calendars=[a, b], duration_minutes=30, **window(2))
    nobody_optional = search(
        sdr, calendars=[a], optional_calendars=[b], min_optional=1, duration_minutes=60, **window(2)
    )

    assert in_the_past.status_code == 200
    assert in_the_past.json()["candidates"] == [] and in_the_past.json()["reasons"] == {
        "window_in_the_past": True
    }
    assert no_common.json()["candidates"] == [] and no_common.json()["reasons"] == {
        "no_common_free_time": True
    }
    assert nobody_optional.json()["reasons"] == {"too_few_optional_free": True}


def test_a_window_no_meeting_of_that_length_fits_says_so_not_notice(sdr):
    anytime = create_calendar(sdr)["id"]  # no notice, no hours, nothing booked
    twenty_minutes = window(1)["start"], at(20)
    off_the_grid = at(10), at(45)  # 35 minutes, but no 30-minute grid slot starts and ends inside it

    for start, end in (twenty_minutes, off_the_grid):
        body = search(sdr, calendars=[anytime], duration_minutes=30, start=start, end=end).json()

        assert body["candidates"] == [] and body["reasons"] == {"window_too_short": True}, (start, end)


def test_it_says_when_there_were_more_candidates_than_the_limit(sdr):
    a, b, _ = three_calendars(sdr)

    exact = search(sdr, calendars=[a, b], duration_minutes=30, limit=4, **window(2)).json()
    more = search(sdr, calendars=[a, b], duration_minutes=30, limit=3, **window(2)).json()
    fullest = search(
        sdr,
        calendars=[a],
        optional_calendars=[b],
        order="most_optional",
        limit=3,
        duration_minutes=30,
        **window(2),
    ).json()

    assert len(exact["candidates"]) == 4 and exact["truncated"] is False
    assert starts(more) == [at(0), at(30), at(60)] and more["truncated"] is True
    assert len(fullest["candidates"]) == 3 and fullest["truncated"] is True


def test_the_grid_is_the_finest_slot_size_involved_unless_asked(sdr):
    coarse = create_calendar(sdr, slot_minutes=60)["id"]
    fine = create_calendar(sdr, slot_minutes=15)["id"]

    default = search(
        sdr, calendars=[coarse], optional_calendars=[fine], duration_minutes=30, **window(1)
    ).json()
    asked = search(
        sdr, calendars=[coarse, fine], duration_minutes=30, granularity_minutes=30, **window(1)
    ).json()

    assert starts(default) == [at(0), at(15), at(30)]
    assert starts(asked) == [at(0), at(30)]


def test_a_search_that_weighs_every_slot_weighs_at_most_the_earliest_few_thousand(sdr):
    """Needing an optional attendee on a one-minute grid, four days are 5,760 slots: the search weighs the
    first MAX_WEIGHED_SLOTS (5,000), says it is truncated and where it stopped, so the agent asks again
    from there. The optional calendar is busy for the first 3.5 days (slot 5,040 on): nothing weighed."""
    person, optional = create_calendar(sdr)["id"], create_calendar(sdr)["id"]
    four_days = window(96)
    busy_block(optional, {"start_time": four_days["start"], "end_time": at_minute(four_days, 5040)})
    ask = {"calendars": [person], "optional_calendars": [optional], "min_optional": 1}
    ask |= {"duration_minutes": 30, "granularity_minutes": 1, "order": "most_optional"}

    cut = search(sdr, **ask, **four_days).json()
    rest = search(sdr, **ask, start=cut["searched"]["end"], end=four_days["end"]).json()

    assert cut["candidates"] == [] and cut["truncated"] is True
    assert cut["searched"] == {"start": four_days["start"], "end": at_minute(four_days, 5000)}
    assert starts(rest)[0] == at_minute(four_days, 5040) and rest["candidates"][0]["optional_free"] == [
        optional
    ]


def at_minute(span: dict[str, str], minutes: int) -> str:
    return iso(parse(span["start"]) + timedelta(minutes=minutes))
