from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.config import HTTP, IN_PROCESS
from bench.meeting_agents import CLIENT_SIDE, FIND_AND_HOLD, earliest_free, working_time
from bench.meeting_week import MEETING, PEOPLE, build, common_free_meetings, person_rules
from bench.runner import Bench
from bench.stats import find
from bookings.rules import open_spans, parse_rules
from bookings.spans import Span
from tests.bench.helpers import tiny

MONDAY = datetime(2027, 3, 22, tzinfo=UTC)  # New York is on summer time already, Berlin not yet


def test_the_agents_own_reading_of_working_hours_matches_the_servers() -> None:
    weeks = build(monday=MONDAY, seed=3)
    for person in PEOPLE:
        settings = person_rules(person, weeks.window)
        rules = parse_rules(
            working_hours=settings["working_hours"], date_overrides=settings["date_overrides"]
        )

        assert working_time(settings, weeks.window) == open_spans(rules, person.zone, weeks.window)


def test_the_fortnight_is_about_a_third_busy_and_leaves_common_time() -> None:
    weeks = build(monday=MONDAY, seed=1)

    assert [round(week.busy_share, 1) for week in weeks.people] == [0.3, 0.3, 0.3]
    assert all(any(key == "series-shared" for key, _ in week.blocks) for week in weeks.people)
    assert common_free_meetings(weeks) >= 50
    # The same seed and Monday give the same weeks: every strategy starts from the same busy time.
    assert build(monday=MONDAY, seed=1).people[0].blocks == weeks.people[0].blocks


def test_earliest_free_skips_busy_time_on_the_half_hour_grid() -> None:
    day = MONDAY + timedelta(hours=13)
    busy = [Span(day, day + timedelta(minutes=40))]

    slot = earliest_free([Span(day, day + timedelta(hours=2))], busy, MEETING)

    assert slot == Span(day + timedelta(hours=1), day + timedelta(hours=1, minutes=30))


@pytest.mark.django_db(transaction=True)
def test_both_strategies_book_distinct_meetings_inside_everyones_hours(live_server: Any) -> None:
    report = Bench(
        tiny(
            modes=(HTTP,),
            scenarios=("meeting",),
            server_url=live_server.url,
            meeting_agents=5,
            http_headers={"Connection": "close"},
        )
    ).run()

    for strategy in (FIND_AND_HOLD, CLIENT_SIDE):
        result = find(report.results, "meeting", strategy, HTTP)
        assert result is not None, strategy
        extra = result.extra
        assert extra["meetings_held"] == extra["holds_in_database"] == 5, (strategy, extra)
        assert result.double_bookings == 0
        assert extra["holds_not_on_all_three"] == extra["holds_outside_working_hours"] == 0
        assert extra["live_reservations_on_busy_time"] == 0
        assert extra["time_to_hold_ms"]["count"] == 5
    client_side = find(report.results, "meeting", CLIENT_SIDE, HTTP)
    assert client_side is not None
    # Five agents after the same earliest slot: the readers collide, and say so with 409s.
    assert client_side.extra["agent_visible_conflicts"] > 0
    goals = {g["goal"]: g for g in report.data["goals"]}
    invariant = next(g for name, g in goals.items() if name.startswith("zero double bookings in the meeting"))
    assert invariant["met"] is True


@pytest.mark.django_db(transaction=True)
def test_the_search_probe_times_find_common_time_in_process() -> None:
    report = Bench(tiny(modes=(IN_PROCESS,), scenarios=("meeting",), meeting_search_calls=3)).run()

    probe = find(report.results, "meeting-search", "search", IN_PROCESS)
    assert probe is not None
    assert probe.attempts == 3 and probe.errors == 0
    assert probe.extra["busy_blocks_per_calendar"] == 1_000
    assert probe.extra["read_ms"]["count"] == probe.extra["rank_ms"]["count"] == 3
    assert any(g["goal"].startswith("availability search") for g in report.data["goals"])
