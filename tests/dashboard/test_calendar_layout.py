"""The calendar timeline's geometry, as pure functions: lanes for overlapping blocks, and the visible hours
(working hours in the calendar's own time zone, or all 24)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from bookings.models import Reservation, ReservationStatus
from dashboard.timeline import (
    FULL_DAY,
    WORKING_HOURS,
    Busy,
    Interval,
    Placement,
    build_timeline,
    lay_out,
    visible_hours,
)

BERLIN = ZoneInfo("Europe/Berlin")
DAY = date(2031, 3, 12)  # a Wednesday; Berlin is UTC+1
NOW = datetime(2031, 3, 1, 12, tzinfo=UTC)  # before DAY: every hold below is still live


def minutes(hhmm: str) -> float:
    hours, mins = hhmm.split(":")
    return int(hours) * 60 + int(mins)


def span(start: str, end: str, *, ended: bool = False) -> Interval:
    return Interval(minutes(start), minutes(end), ended=ended)


# --- Lanes ------------------------------------------------------------------------------------------------


def test_blocks_that_do_not_overlap_take_the_whole_column() -> None:
    layout = lay_out([span("09:00", "10:00"), span("10:00", "11:00"), span("13:00", "14:00")], max_lanes=3)
    assert layout.placements == [Placement(lane=0, span=1, lanes=1)] * 3
    assert layout.overflows == []


def test_two_overlapping_blocks_sit_side_by_side() -> None:
    layout = lay_out([span("09:00", "10:00"), span("09:30", "10:30")], max_lanes=3)
    assert layout.placements == [Placement(lane=0, span=1, lanes=2), Placement(lane=1, span=1, lanes=2)]


def test_a_block_widens_into_lanes_nothing_beside_it_uses() -> None:
    # 09:00-12:00 overlaps both others; 09:00-10:00 and 10:30-11:30 sit in the second lane one after the
    # other, and the third lane, needed only by 10:45-11:15, is free beside 09:00-10:00.
    long, early, late, short = (
        span("09:00", "12:00"),
        span("09:00", "10:00"),
        span("10:30", "11:30"),
        span("10:45", "11:15"),
    )
    layout = lay_out([long, early, late, short], max_lanes=4)
    assert layout.placements == [
        Placement(lane=0, span=1, lanes=3),
        Placement(lane=1, span=2, lanes=3),  # nothing in lane 2 before 10:45
        Placement(lane=1, span=1, lanes=3),
        Placement(lane=2, span=1, lanes=3),
    ]


def test_back_to_back_blocks_are_not_a_cluster() -> None:
    layout = lay_out([span("09:00", "10:00"), span("10:00", "11:00"), span("09:30", "10:00")], max_lanes=3)
    assert layout.placements[1] == Placement(lane=0, span=1, lanes=1)  # starts as the others end


def test_live_blocks_take_the_left_lanes_before_ended_ones() -> None:
    released = span("10:00", "11:00", ended=True)
    booked = span("10:00", "11:00")
    layout = lay_out([released, booked], max_lanes=3)
    assert layout.placements == [Placement(lane=1, span=1, lanes=2), Placement(lane=0, span=1, lanes=2)]


def test_a_crowd_of_ended_blocks_folds_into_one_chip_beside_the_live_one() -> None:
    released = [span("10:00", "11:00", ended=True) for _ in range(70)]
    booked = span("10:00", "11:00")
    layout = lay_out([*released, booked], max_lanes=3)

    assert layout.placements[-1] == Placement(lane=0, span=1, lanes=2)  # half the column, not a third
    assert layout.placements[:-1] == [None] * 70
    (chip,) = layout.overflows
    assert (chip.count, chip.lane, chip.lanes, chip.start, chip.end) == (70, 1, 2, 600, 660)


def test_only_ended_blocks_fold_into_a_chip_the_width_of_the_column() -> None:
    layout = lay_out([span("10:00", "11:00", ended=True) for _ in range(5)], max_lanes=3)
    assert layout.placements == [None] * 5
    assert [(c.count, c.lane, c.lanes) for c in layout.overflows] == [(5, 0, 1)]


def test_too_many_live_blocks_keep_all_but_the_last_lane_and_fold_the_rest() -> None:
    # Upstream busy time may overlap anything (people double-book themselves).
    layout = lay_out([span("09:00", "10:00") for _ in range(5)], max_lanes=3)
    assert layout.placements[:2] == [Placement(lane=0, span=1, lanes=3), Placement(lane=1, span=1, lanes=3)]
    assert layout.placements[2:] == [None, None, None]
    assert [(c.count, c.lane, c.lanes) for c in layout.overflows] == [(3, 2, 3)]


def test_nothing_widens_into_the_chip() -> None:
    # One cluster over 09:00-12:00 needing four lanes: the third 09:00 block and 09:30-12:00 fold into the
    # chip (09:00-12:00, last lane); 11:00-11:30 widens over the second lane, free by then, but not into it.
    blocks = [span("09:00", "10:00"), span("09:00", "10:00"), span("09:00", "10:00"), span("09:30", "12:00")]
    layout = lay_out([*blocks, span("11:00", "11:30")], max_lanes=3)
    (chip,) = layout.overflows
    assert (chip.count, chip.lane, chip.start, chip.end) == (2, 2, 540, 720)
    assert layout.placements[4] == Placement(lane=0, span=2, lanes=3)


def test_each_cluster_has_its_own_lanes() -> None:
    layout = lay_out(
        [span("09:00", "10:00"), span("09:00", "10:00"), span("09:00", "10:00"), span("14:00", "15:00")],
        max_lanes=6,
    )
    assert {p.lanes for p in layout.placements[:3] if p} == {3}
    assert layout.placements[3] == Placement(lane=0, span=1, lanes=1)


# --- Visible hours ----------------------------------------------------------------------------------------


def booking(start: datetime, end: datetime, status: str = ReservationStatus.COMMITTED) -> Reservation:
    """An unsaved reservation: build_timeline reads only its times and state."""
    return Reservation(
        hold_id=f"hld_{start:%H%M}{end:%H%M}",
        booking_id=f"bk_{start:%H%M}{end:%H%M}" if status != ReservationStatus.HELD else None,
        status=status,
        priority=100,
        start_time=start,
        end_time=end,
        fencing_token=1,
        expires_at=NOW + timedelta(days=30) if status == ReservationStatus.HELD else None,
        bump_window_ends_at=NOW + timedelta(days=30) if status != ReservationStatus.HELD else None,
    )


def berlin(hour: int, minute: int = 0, *, day: date = DAY) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=BERLIN)


def test_working_hours_are_eight_to_six_and_the_toggle_shows_the_whole_day() -> None:
    assert visible_hours(full_day=False) == WORKING_HOURS == (8, 18)
    assert visible_hours(full_day=True) == FULL_DAY == (0, 24)


def test_blocks_outside_working_hours_are_counted_not_drawn() -> None:
    early = booking(berlin(6, 30), berlin(7, 30))
    late = booking(berlin(19), berlin(20))
    inside = booking(berlin(9), berlin(10))

    timeline = build_timeline(days=[DAY], reservations=[early, late, inside], zone=BERLIN, now=NOW)

    (column,) = timeline.columns
    assert [b.reservation for b in column.blocks] == [inside]
    assert (column.earlier, column.later, timeline.hidden_outside) == (1, 1, 2)
    assert [h["label"] for h in timeline.hours] == [f"{h:02d}:00" for h in range(8, 18)]
    block = column.blocks[0]
    assert (block.top, block.height) == (10.0, 10.0)  # 09:00 is 1 h into a 10 h window


def test_the_hours_are_the_calendars_own() -> None:
    # 07:30-08:00 UTC is 08:30-09:00 in Berlin (inside working hours), and before dawn in New York.
    seen_in_berlin = build_timeline(
        days=[DAY],
        reservations=[
            booking(datetime(2031, 3, 12, 7, 30, tzinfo=UTC), datetime(2031, 3, 12, 8, tzinfo=UTC))
        ],
        zone=BERLIN,
        now=NOW,
    )
    assert len(seen_in_berlin.columns[0].blocks) == 1
    seen_in_new_york = build_timeline(
        days=[DAY],
        reservations=[
            booking(datetime(2031, 3, 12, 7, 30, tzinfo=UTC), datetime(2031, 3, 12, 8, tzinfo=UTC))
        ],
        zone=ZoneInfo("America/New_York"),
        now=NOW,
    )
    assert seen_in_new_york.columns[0].blocks == [] and seen_in_new_york.columns[0].earlier == 1


def test_a_block_across_the_edge_is_cut_there_and_marked() -> None:
    across = booking(berlin(7), berlin(9))
    evening = booking(berlin(17, 30), berlin(23))
    timeline = build_timeline(days=[DAY], reservations=[across, evening], zone=BERLIN, now=NOW)

    first, second = timeline.columns[0].blocks
    assert (first.start_minute, first.end_minute, first.starts_before, first.ends_after) == (
        480,
        540,
        True,
        False,
    )
    assert (second.start_minute, second.end_minute, second.starts_before, second.ends_after) == (
        1050,
        1080,
        False,
        True,
    )
    assert second.top + second.height == 100.0


def test_the_whole_day_shows_everything_and_no_counts() -> None:
    early, late = booking(berlin(6, 30), berlin(7, 30)), booking(berlin(19), berlin(20))
    timeline = build_timeline(days=[DAY], reservations=[early, late], zone=BERLIN, now=NOW, hours=FULL_DAY)
    column = timeline.columns[0]
    assert len(column.blocks) == 2 and (column.earlier, column.later) == (0, 0)
    assert len(timeline.hours) == 24
    assert column.blocks[0].top == 100 * 390 / 1440


def test_a_multi_day_block_is_cut_at_midnight_in_each_column() -> None:
    overnight = booking(berlin(16), berlin(10, day=DAY + timedelta(days=1)))
    timeline = build_timeline(
        days=[DAY, DAY + timedelta(days=1)], reservations=[overnight], zone=BERLIN, now=NOW
    )
    first, second = (column.blocks[0] for column in timeline.columns)
    assert (first.start_minute, first.end_minute, first.ends_after) == (960, 1080, True)
    assert (second.start_minute, second.end_minute, second.starts_before) == (480, 600, True)


def test_the_now_line_shows_only_inside_the_visible_hours() -> None:
    morning = datetime.combine(DAY, time(12), tzinfo=BERLIN)  # 12:00: 40 % into 08-18
    night = datetime.combine(DAY, time(22), tzinfo=BERLIN)
    assert build_timeline(days=[DAY], reservations=[], zone=BERLIN, now=morning).columns[0].now_top == 40.0
    assert build_timeline(days=[DAY], reservations=[], zone=BERLIN, now=night).columns[0].now_top is None
    full = build_timeline(days=[DAY], reservations=[], zone=BERLIN, now=night, hours=FULL_DAY)
    assert full.columns[0].now_top == 100 * 22 / 24


def test_busy_time_and_reservations_share_the_lanes_and_kinds_read_as_people_read_them() -> None:
    held = booking(berlin(9), berlin(10), status=ReservationStatus.HELD)
    gated = booking(berlin(11), berlin(12), status=ReservationStatus.HELD)
    gated.awaiting_approval = "apr_123"
    released = booking(berlin(9), berlin(10), status=ReservationStatus.RELEASED)
    busy = Busy("google", berlin(9, 30), berlin(10, 30))

    timeline = build_timeline(
        days=[DAY], reservations=[held, gated, released], zone=BERLIN, now=NOW, busy=[busy]
    )

    kinds = {(b.kind, b.label, b.lane, b.lanes) for b in timeline.columns[0].blocks}
    assert kinds == {
        ("held", "held", 0, 3),
        ("busy", "busy", 1, 3),
        ("ended", "released", 2, 3),
        ("held", "awaiting approval", 0, 1),
    }
