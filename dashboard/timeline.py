"""The calendar page's timeline geometry, as pure functions (no database, no request): which hours of a
day show, where each reservation or busy interval sits in its day column, and how overlapping ones
share the column.

Everything is in wall-clock minutes of the calendar's time zone, so working hours are the calendar's
own (08:00–18:00 in New York for a New York calendar), and the template gets percentages it turns
into positions (app.js applies them: the Content-Security-Policy refuses style attributes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bookings.models import BusyBlock, Calendar, Reservation, ReservationStatus
from dashboard.wording import provider_name

MINUTES_PER_DAY = 24 * 60
# Calendars have no working-hours setting: the timeline opens on office hours in the calendar's own time
# zone, and the "24 h" toggle shows the whole day.
WORKING_HOURS = (8, 18)
FULL_DAY = (0, 24)
# A block shorter than this shows its title only; one shorter than COMPACT its title and times (the rest
# is in its drawer and its tooltip).
SHORT_BLOCK_MINUTES = 30
COMPACT_BLOCK_MINUTES = 55
# Side-by-side lanes a day column shows before the rest of an overlapping cluster folds into one
# "+N more" chip: beyond three a week column's chips are too narrow to read a word of.
MAX_LANES = {"day": 6, "week": 3}


def calendar_zone(calendar: Calendar) -> ZoneInfo:
    """The zone a calendar's times show in; UTC for a name this server does not know."""
    try:
        return ZoneInfo(calendar.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


# --- Which blocks, in which kind -------------------------------------------------------------------


def block_kind(reservation: Reservation, now: datetime) -> tuple[str, str]:
    """(css kind, status as people read it) at `now`, the database's clock. Kinds: held, committed,
    frozen, ended (released, expired, lapsed, evicted, bumped, cancelled)."""
    status = reservation.status
    if status == ReservationStatus.HELD:
        # A lapsed hold is still 'held' until a writer or the sweep expires it; it blocks nothing.
        if not reservation.is_live_at(now):
            return "ended", "lapsed"
        return "held", "awaiting approval" if reservation.awaiting_approval else "held"
    if status == ReservationStatus.COMMITTED:
        return ("frozen", "frozen") if reservation.is_frozen_at(now) else ("committed", "committed")
    return "ended", status


def has_upstream_conflict(reservation: Reservation) -> bool:
    """A booking kept although the owner's own calendar has an event over it (flagged by the sync)."""
    return reservation.upstream_conflict_at is not None and reservation.status == ReservationStatus.COMMITTED


@dataclass
class Busy:
    """An interval of the owner's own calendar (one upstream event; its stored pieces joined)."""

    source: str
    start_time: datetime
    end_time: datetime

    @property
    def source_name(self) -> str:
        return provider_name(self.source)


def join_busy(blocks: Sequence[BusyBlock]) -> list[Busy]:
    """One interval per upstream event: an event longer than a reservation may be is stored in
    back-to-back pieces (so the engine's bounded overlap scan finds it), and shows as one block."""
    joined: dict[tuple[int, str], list[Busy]] = {}
    for block in sorted(blocks, key=lambda b: (b.connection_id, b.event_key, b.start_time)):
        pieces = joined.setdefault((block.connection_id, block.event_key), [])
        if pieces and pieces[-1].end_time == block.start_time:
            pieces[-1].end_time = block.end_time
        else:
            pieces.append(Busy(block.source, block.start_time, block.end_time))
    return sorted((busy for pieces in joined.values() for busy in pieces), key=lambda b: b.start_time)


# --- Overlapping intervals side by side ---------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """What the lane layout needs of a block: its minutes, and `ended` (ended reservations yield their
    place: live ones take the left lanes, and ended ones are the first to fold into "+N more")."""

    start: float
    end: float
    ended: bool = False


@dataclass(frozen=True)
class Placement:
    lane: int  # 0 = leftmost
    span: int  # lanes it widens over, to its right, where nothing overlaps it
    lanes: int  # lanes its cluster divides the column into


@dataclass(frozen=True)
class Overflow:
    """The "+N more" chip of a cluster with more overlapping blocks than lanes: it takes the last lane
    over the time the folded blocks cover."""

    start: float
    end: float
    count: int
    lane: int
    lanes: int


@dataclass
class Layout:
    placements: list[Placement | None]  # per interval, in the order given; None: folded into an overflow
    overflows: list[Overflow]


def _overlap(a: Interval, b: Interval) -> bool:
    return a.start < b.end and b.start < a.end  # half-open: back to back is not overlapping


def lay_out(intervals: Sequence[Interval], *, max_lanes: int) -> Layout:
    """Columns within a day, as calendars draw them.

    Intervals that overlap, directly or through a chain, form a cluster; a cluster divides the column
    into as many lanes as it needs at most at once (each interval in the first lane free for its whole
    time), and each interval then widens to its right over lanes nothing overlapping it uses. A cluster
    needing more than `max_lanes` folds what does not fit into one overflow chip in its last lane: the
    ended intervals beyond the live ones' lanes, and live ones too past `max_lanes - 1` lanes.
    """
    assert max_lanes >= 2, "one lane for intervals and one for the overflow chip at least"
    placements: list[Placement | None] = [None] * len(intervals)
    overflows: list[Overflow] = []
    for cluster in _clusters(intervals):
        # Live first, then by time: first fit in that order keeps ended blocks out of the left lanes.
        ordered = sorted(cluster, key=lambda i: (intervals[i].ended, intervals[i].start, -intervals[i].end))
        lanes_taken: list[list[Interval]] = []
        lane_of: dict[int, int] = {}
        for index in ordered:
            interval = intervals[index]
            lane = next(
                (k for k, taken in enumerate(lanes_taken) if not any(_overlap(interval, t) for t in taken)),
                len(lanes_taken),
            )
            if lane == len(lanes_taken):
                lanes_taken.append([])
            lanes_taken[lane].append(interval)
            lane_of[index] = lane
        lanes = len(lanes_taken)
        folds = lanes > max_lanes
        if folds:
            # Live intervals were placed first, so they fill the lowest lanes: keep those lanes if they fit
            # beside the chip (every ended interval beyond them folds), else as many as fit.
            live_lanes = 1 + max((lane_of[i] for i in cluster if not intervals[i].ended), default=-1)
            kept = min(live_lanes, max_lanes - 1)
            lanes = kept + 1
            folded = [intervals[i] for i in cluster if lane_of[i] >= kept]
            chip = Overflow(
                start=min(f.start for f in folded),
                end=max(f.end for f in folded),
                count=len(folded),
                lane=lanes - 1,
                lanes=lanes,
            )
            overflows.append(chip)
            # The chip's lane holds the chip alone: nothing widens into it where the chip is.
            lanes_taken = [*lanes_taken[: lanes - 1], [Interval(chip.start, chip.end)]]
        for index in cluster:
            lane = lane_of[index]
            if folds and lane >= lanes - 1:
                continue  # shown as part of the chip
            interval, span = intervals[index], 1
            while lane + span < lanes and not any(_overlap(interval, t) for t in lanes_taken[lane + span]):
                span += 1
            placements[index] = Placement(lane=lane, span=span, lanes=lanes)
    return Layout(placements=placements, overflows=overflows)


def _clusters(intervals: Sequence[Interval]) -> list[list[int]]:
    """Indexes of intervals that overlap, directly or through a chain, in order of start."""
    clusters: list[list[int]] = []
    cluster_end = float("-inf")
    for index in sorted(range(len(intervals)), key=lambda i: (intervals[i].start, -intervals[i].end)):
        interval = intervals[index]
        if not clusters or interval.start >= cluster_end:
            clusters.append([])
            cluster_end = interval.end
        clusters[-1].append(index)
        cluster_end = max(cluster_end, interval.end)
    return clusters


# --- Day columns in the visible hours -----------------------------------------------------------------


@dataclass
class Block:
    """One reservation's (or one busy interval's) piece of one day column, cut to the visible hours;
    top/height/left/width in percent of the column."""

    reservation: Reservation | None
    busy: Busy | None
    kind: str  # css class: held | committed | frozen | ended | busy
    label: str  # status as people read it: held, awaiting approval, committed, frozen, lapsed, ..., busy
    start_minute: float  # wall-clock minutes since the column's local midnight, within the visible hours
    end_minute: float
    starts_before: bool = False  # it begins before what the column shows (earlier hours or days)
    ends_after: bool = False
    top: float = 0
    height: float = 0
    lane: int = 0
    span: int = 1
    lanes: int = 1

    @property
    def left(self) -> float:
        return 100 * self.lane / self.lanes

    @property
    def width(self) -> float:
        return 100 * self.span / self.lanes

    @property
    def upstream_conflict(self) -> bool:
        return self.reservation is not None and has_upstream_conflict(self.reservation)

    @property
    def is_short(self) -> bool:
        return self.end_minute - self.start_minute < SHORT_BLOCK_MINUTES

    @property
    def is_compact(self) -> bool:
        return SHORT_BLOCK_MINUTES <= self.end_minute - self.start_minute < COMPACT_BLOCK_MINUTES

    @property
    def public_id(self) -> str:
        """The id people and links know it by: the booking's once committed, else the hold's."""
        if self.reservation is None:
            return ""
        return self.reservation.booking_id or self.reservation.hold_id


@dataclass
class MoreChip:
    """ "+N more": overlapping blocks a column has no lane left for (they are in the list below)."""

    count: int
    top: float
    height: float
    left: float
    width: float


@dataclass
class DayColumn:
    day: date
    is_today: bool
    blocks: list[Block] = field(default_factory=list)
    more: list[MoreChip] = field(default_factory=list)
    now_top: float | None = None  # None: not today, or now is outside the visible hours
    earlier: int = 0  # blocks entirely before the visible hours
    later: int = 0  # ... and entirely after them
    url: str = ""  # the page's own concern: where the column's heading (and "+N more") lead


@dataclass
class Timeline:
    columns: list[DayColumn]
    first_hour: int
    last_hour: int  # exclusive

    @property
    def hours(self) -> list[dict[str, object]]:
        span = self.last_hour - self.first_hour
        return [
            {"label": f"{hour:02d}:00", "top": 100 * (hour - self.first_hour) / span}
            for hour in range(self.first_hour, self.last_hour)
        ]

    @property
    def hour_count(self) -> int:
        return self.last_hour - self.first_hour

    @property
    def hidden_outside(self) -> int:
        """Blocks in range but outside the visible hours."""
        return sum(column.earlier + column.later for column in self.columns)


def visible_hours(*, full_day: bool) -> tuple[int, int]:
    """The hours the timeline shows: working hours, or the whole day (the "24 h" toggle)."""
    return FULL_DAY if full_day else WORKING_HOURS


def midnight(day: date, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, time(), tzinfo=zone)


def wall_minutes(moment: datetime, zone: ZoneInfo) -> float:
    local = moment.astimezone(zone)
    return local.hour * 60 + local.minute + local.second / 60


def build_timeline(
    *,
    days: list[date],
    reservations: Sequence[Reservation],
    zone: ZoneInfo,
    now: datetime,
    busy: Sequence[Busy] = (),
    hours: tuple[int, int] = WORKING_HOURS,
    max_lanes: int = MAX_LANES["week"],
) -> Timeline:
    """The day columns of `days` in `zone`, showing `hours` (first, last-exclusive) of each day.

    A block reaching past the visible hours is cut at their edge (and marked as going on); one entirely
    outside them is only counted (`earlier`, `later`), so the page can say what the 24 h view would show.
    `now` (the database's clock) decides each reservation's kind and draws the now line.
    """
    first_hour, last_hour = hours
    window_start, window_end = first_hour * 60, last_hour * 60
    length = window_end - window_start
    today = now.astimezone(zone).date()
    items: list[tuple[Reservation | None, Busy | None, datetime, datetime]] = [
        *((r, None, r.start_time, r.end_time) for r in reservations),
        *((None, b, b.start_time, b.end_time) for b in busy),
    ]
    columns = []
    for day in days:
        day_start, day_end = midnight(day, zone), midnight(day + timedelta(days=1), zone)
        column = DayColumn(day=day, is_today=day == today)
        if column.is_today and window_start <= (now_minute := wall_minutes(now, zone)) < window_end:
            column.now_top = 100 * (now_minute - window_start) / length
        for reservation, interval, starts, ends in items:
            if not (starts < day_end and ends > day_start):
                continue
            start = 0.0 if starts <= day_start else wall_minutes(starts, zone)
            end = MINUTES_PER_DAY if ends >= day_end else wall_minutes(ends, zone)
            end = max(end, start + 1)  # a DST fold can make the wall clock run backwards
            if end <= window_start:
                column.earlier += 1
                continue
            if start >= window_end:
                column.later += 1
                continue
            kind, label = block_kind(reservation, now) if reservation is not None else ("busy", "busy")
            column.blocks.append(
                Block(
                    reservation=reservation,
                    busy=interval,
                    kind=kind,
                    label=label,
                    start_minute=max(start, window_start),
                    end_minute=min(end, window_end),
                    starts_before=starts < day_start or start < window_start,
                    ends_after=ends > day_end or end > window_end,
                )
            )
        _place(column, max_lanes=max_lanes, window_start=window_start, length=length)
        columns.append(column)
    return Timeline(columns=columns, first_hour=first_hour, last_hour=last_hour)


def _place(column: DayColumn, *, max_lanes: int, window_start: int, length: int) -> None:
    """Lanes, then percentages of the visible hours. Blocks folded into a "+N more" chip leave the column."""
    layout = lay_out(
        [Interval(b.start_minute, b.end_minute, ended=b.kind == "ended") for b in column.blocks],
        max_lanes=max_lanes,
    )
    placed = []
    for block, placement in zip(column.blocks, layout.placements, strict=True):
        if placement is None:
            continue
        block.lane, block.span, block.lanes = placement.lane, placement.span, placement.lanes
        block.top = 100 * (block.start_minute - window_start) / length
        block.height = 100 * (block.end_minute - block.start_minute) / length
        placed.append(block)
    column.blocks = placed
    column.more = [
        MoreChip(
            count=chip.count,
            top=100 * (chip.start - window_start) / length,
            height=100 * (chip.end - chip.start) / length,
            left=100 * chip.lane / chip.lanes,
            width=100 / chip.lanes,
        )
        for chip in layout.overflows
    ]
