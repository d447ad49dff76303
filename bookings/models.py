"""Calendars and reservations. The no-double-booking guarantee is the exclusion constraint below."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cached_property, partial

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import BigIntegerRangeField, DateTimeRangeField, RangeOperators
from django.db import models
from django.db.models import F, Func, Q, Value
from django.db.models.functions import Now

from agentcal.ids import new_public_id
from agentcal.planner import Unindexed
from bookings.rules import CalendarRules, buffer_between, parse_rules
from bookings.spans import Span
from workspaces.models import Agent, Workspace


class CalendarBounds:
    """A calendar's settings' bounds, inclusive: its check constraints, the API's CalendarInput and
    (through it) the dashboard's settings form all read them."""

    SLOT_MINUTES = (1, 24 * 60)
    HOLD_TTL_SECONDS = (1, 3600)
    BUMP_WINDOW_SECONDS = (0, 24 * 3600)
    MAX_BOOKING_MINUTES = (1, 7 * 24 * 60)
    # Half a day of space around a meeting is already a rule about the day, not a buffer.
    BUFFER_MINUTES = (0, 12 * 60)
    # A quarter's notice: longer is a calendar closed for now, which date overrides say better.
    MIN_NOTICE_MINUTES = (0, 90 * 24 * 60)


class Calendar(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "cal"), editable=False
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="calendars")
    name = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    slot_minutes = models.PositiveIntegerField(default=30)
    hold_ttl_seconds = models.PositiveIntegerField(default=30)
    bump_window_seconds = models.PositiveIntegerField(default=30)
    max_booking_minutes = models.PositiveIntegerField(default=480)
    # The calendar rules (bookings/rules.py reads and validates them; stored as WorkingHours.to_json()
    # and CalendarRules.date_overrides_json() write them). NULL working hours: open at any time.
    working_hours = models.JSONField(null=True, blank=True)
    date_overrides = models.JSONField(default=dict, blank=True)
    buffer_before_minutes = models.PositiveIntegerField(default=0)
    buffer_after_minutes = models.PositiveIntegerField(default=0)
    min_notice_minutes = models.PositiveIntegerField(default=0)
    # The calendar's state version. Every write that changes a reservation's state on this calendar
    # starts with `UPDATE calendar SET version = version + 1 ... RETURNING version`: that row lock
    # serialises writers per calendar (no exclusion-constraint deadlocks under a herd), the new value
    # is the fencing token of any reservation created in the transaction, and it is the ETag that
    # `If-Match` compares against.
    version = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(slot_minutes__range=CalendarBounds.SLOT_MINUTES),
                name="calendar_slot_minutes_range",
            ),
            models.CheckConstraint(
                condition=Q(hold_ttl_seconds__range=CalendarBounds.HOLD_TTL_SECONDS),
                name="calendar_hold_ttl_range",
            ),
            # The column is unsigned already: only the upper bound needs a check.
            models.CheckConstraint(
                condition=Q(bump_window_seconds__lte=CalendarBounds.BUMP_WINDOW_SECONDS[1]),
                name="calendar_bump_window_range",
            ),
            models.CheckConstraint(
                condition=Q(max_booking_minutes__range=CalendarBounds.MAX_BOOKING_MINUTES),
                name="calendar_max_booking_range",
            ),
            models.CheckConstraint(
                condition=Q(buffer_before_minutes__lte=CalendarBounds.BUFFER_MINUTES[1])
                & Q(buffer_after_minutes__lte=CalendarBounds.BUFFER_MINUTES[1]),
                name="calendar_buffer_range",
            ),
            models.CheckConstraint(
                condition=Q(min_notice_minutes__lte=CalendarBounds.MIN_NOTICE_MINUTES[1]),
                name="calendar_min_notice_range",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @cached_property
    def rules(self) -> CalendarRules | None:
        """The stored working hours and date overrides, parsed (they were validated when written);
        None when there are neither (open at any time)."""
        if self.working_hours is None and not self.date_overrides:
            return None
        return parse_rules(working_hours=self.working_hours, date_overrides=self.date_overrides or None)

    @property
    def has_rules(self) -> bool:
        """Whether any rule can refuse a write here: a calendar without them costs the write path nothing."""
        return bool(
            self.working_hours is not None
            or self.date_overrides
            or self.buffer_before_minutes
            or self.buffer_after_minutes
            or self.min_notice_minutes
        )

    @property
    def buffer(self) -> timedelta:
        """The least free time between any two things on this calendar (rules.buffer_between)."""
        return buffer_between(self.buffer_before_minutes, self.buffer_after_minutes)


class ReservationStatus(models.TextChoices):
    HELD = "held"
    COMMITTED = "committed"
    EXPIRED = "expired"
    RELEASED = "released"
    EVICTED = "evicted"  # a hold taken over by a strictly higher priority
    BUMPED = "bumped"  # a commit taken over inside its bump window
    CANCELLED = "cancelled"


LIVE_STATUSES = (ReservationStatus.HELD, ReservationStatus.COMMITTED)
# What a booking (a row with a booking id) can read as: it was committed, and may have ended since.
BOOKING_STATUSES = (
    ReservationStatus.COMMITTED.value,
    ReservationStatus.BUMPED.value,
    ReservationStatus.CANCELLED.value,
)

# No reservation is longer than this (max_booking_minutes is capped at 7 days by the calendar's check
# constraint). Overlap queries use it as a lower bound on start_time, so the (calendar, start_time)
# index reads a bounded window instead of a calendar's whole history.
MAX_RESERVATION_LENGTH = timedelta(days=7)


def lapsed_hold_q(prefix: str = "") -> Q:
    """A hold whose expiry has come, by the database's clock (`Now()`). `prefix` reaches reservations
    through a relation (`"reservations__"`). SQL twin: bookings.sql.lapsed_hold()."""
    return Q(**{f"{prefix}status": ReservationStatus.HELD, f"{prefix}expires_at__lte": Now()})


def live_hold_q(prefix: str = "") -> Q:
    """A hold that has not lapsed, by the database's clock. SQL twin: bookings.sql.live_hold()."""
    return Q(**{f"{prefix}status": ReservationStatus.HELD, f"{prefix}expires_at__gt": Now()})


def overlapping_q(span: Span) -> Q:
    """Rows (reservations or busy blocks) whose `[start, end)` overlaps the span's. The lower bound on
    start_time adds nothing logically; it bounds the (calendar, start_time) index scan. SQL:
    bookings.sql.overlaps()."""
    return Q(
        start_time__lt=span.end, start_time__gt=span.start - MAX_RESERVATION_LENGTH, end_time__gt=span.start
    )


class ReservationQuerySet(models.QuerySet["Reservation"]):
    """The time rules for ORM readers, always at the database's clock (`Now()`). The same rules in SQL
    are in bookings/sql.py, and per row in the Reservation methods `status_at()`, `is_live_at()`."""

    def live(self) -> ReservationQuerySet:
        """Reservations that block their span now: held or committed, minus holds that have lapsed
        (still 'held' until a writer or the sweep expires them). SQL twin: bookings.sql.live() (that
        module's docstring says where upstream busy time will join them)."""
        return self.filter(status__in=LIVE_STATUSES).exclude(lapsed_hold_q())

    def live_holds(self) -> ReservationQuerySet:
        return self.filter(live_hold_q())

    def lapsed_holds(self) -> ReservationQuerySet:
        return self.filter(lapsed_hold_q())

    def overlapping(self, span: Span) -> ReservationQuerySet:
        return self.filter(overlapping_q(span))

    def committed_unindexed(self) -> ReservationQuerySet:
        """Committed rows, for a read that finds them by another index (a booking's rows by booking id).
        The status is `Unindexed`: on a table never analyzed, `status = 'committed'` led the planner to
        AND that look-up with the exclusion constraint's index, every live reservation there is."""
        return self.filter(Unindexed(Q(status=ReservationStatus.COMMITTED)))

    def committed_not_ended(self) -> ReservationQuerySet:
        """Committed reservations whose span ends after now, read through the exclusion constraint's
        index (the span is written as that index has it): no other index knows a reservation's end, and
        every past meeting stays committed for good."""
        return self.alias(live_span=TsTzRange(F("start_time"), F("end_time"), Value("[)"))).filter(
            status=ReservationStatus.COMMITTED, live_span__overlap=TsTzRange(Now(), Value(None))
        )


class TsTzRange(Func):
    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class Int8Range(Func):
    function = "INT8RANGE"
    output_field = BigIntegerRangeField()


class Reservation(models.Model):
    """One calendar's share of a hold or booking.

    A hold over several calendars (`also_calendars`) is one row per calendar sharing `hold_id`; they
    change state together. The same row becomes the booking when the hold is committed: `booking_id`
    is then set (same random suffix as the hold id).
    """

    # Every index below is paid for by every hold and commit: lookups by hold_id use the unique
    # (hold_id, calendar) constraint, by calendar the (calendar, start_time) index; the rest are partial
    # and none is a varchar_pattern_ops copy (nothing here is searched with LIKE).
    hold_id = models.CharField(max_length=32, default=partial(new_public_id, "hld"))
    booking_id = models.CharField(max_length=32, null=True, blank=True)
    calendar = models.ForeignKey(
        Calendar, on_delete=models.CASCADE, related_name="reservations", db_index=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="reservations")
    # The calendar named in the request URL; the others came from `also_calendars`.
    is_primary = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=ReservationStatus.choices)
    priority = models.IntegerField()
    start_time = models.DateTimeField()
    end_time = models.DateTimeField()
    # sha256 of the hold token handed to the agent; direct commits have none.
    hold_token_hash = models.CharField(max_length=64, null=True, blank=True)
    fencing_token = models.BigIntegerField()
    version = models.IntegerField(default=1)
    title = models.CharField(max_length=500, blank=True)
    attendees = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField(null=True, blank=True)
    committed_at = models.DateTimeField(null=True, blank=True)
    bump_window_ends_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # Set while a human approval gates this hold: only the approval's decision may commit or release
    # it, and the agent's heartbeat must not shorten the approval's pin.
    awaiting_approval = models.CharField(max_length=32, null=True, blank=True)
    # Set when a human's own calendar (upstream sync) put an event over this committed booking: the
    # booking stays, and the owner and agent are told (`booking.upstream_conflict`); cleared if the
    # upstream event moves away.
    upstream_conflict_at = models.DateTimeField(null=True, blank=True)
    # Which reservation took this one's place (eviction or bump); never chains further.
    displaced_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    objects = ReservationQuerySet.as_manager()

    class Meta:
        constraints = [
            # THE guarantee: no two live reservations on one calendar overlap. Half-open '[)' ranges so
            # back-to-back meetings fit. int8range(calendar_id, calendar_id, '[]') stands in for
            # `calendar_id WITH =`, which would need the btree_gist extension (absent from pgserver).
            # Expired-but-unswept holds are still 'held' here; writers expire them lazily in the same
            # transaction before inserting, so they never block.
            ExclusionConstraint(
                name="reservation_no_overlapping_live",
                index_type="GIST",
                expressions=[
                    (Int8Range(F("calendar_id"), F("calendar_id"), Value("[]")), RangeOperators.OVERLAPS),
                    (TsTzRange(F("start_time"), F("end_time"), Value("[)")), RangeOperators.OVERLAPS),
                ],
                condition=Q(status__in=LIVE_STATUSES),
            ),
            models.CheckConstraint(
                condition=Q(end_time__gt=F("start_time")), name="reservation_range_not_empty"
            ),
            models.CheckConstraint(
                condition=~Q(status=ReservationStatus.HELD) | Q(expires_at__isnull=False),
                name="reservation_held_has_expiry",
            ),
            models.CheckConstraint(
                condition=~Q(status__in=[ReservationStatus.COMMITTED, ReservationStatus.BUMPED])
                | (
                    Q(committed_at__isnull=False)
                    & Q(bump_window_ends_at__isnull=False)
                    & Q(booking_id__isnull=False)
                ),
                name="reservation_commit_fields",
            ),
            models.UniqueConstraint(fields=["hold_id", "calendar"], name="reservation_one_row_per_calendar"),
        ]
        indexes = [
            # Overlap look-ups outside the constraint (pre-checks, availability, alternatives).
            models.Index(fields=["calendar", "start_time"], name="reservation_cal_start"),
            # GET /v1/bookings/{id}, cancel.
            models.Index(
                fields=["booking_id"], condition=Q(booking_id__isnull=False), name="reservation_booking_id"
            ),
            # Commit by hold_token.
            models.Index(
                fields=["hold_token_hash"],
                condition=Q(hold_token_hash__isnull=False),
                name="reservation_hold_token",
            ),
            # An agent's live holds, counted by its live-holds budget in every hold's write
            # (bookings/engine/budgets.py): only held rows, so an agent's history does not slow it.
            models.Index(
                fields=["agent", "expires_at"],
                condition=Q(status=ReservationStatus.HELD, is_primary=True),
                name="reservation_agent_live_holds",
            ),
            # ON DELETE SET NULL of displaced_by (a calendar's deletion) finds the rows pointing at it.
            models.Index(
                fields=["displaced_by"],
                condition=Q(displaced_by__isnull=False),
                name="reservation_displaced_by",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.hold_id}@{self.calendar_id} {self.status}"

    # The time rules, row by row. `now` is always the database's clock (the time the calendar lock was
    # granted, or a reader's `SELECT now()`), never the web worker's: workers drift, and the database
    # is the one clock every writer shares. SQL twins: bookings/sql.py; ORM: ReservationQuerySet.

    def is_lapsed_at(self, now: datetime) -> bool:
        """A hold whose expiry has come: it stays 'held' until a writer or the sweep expires it, but it
        blocks nothing. At exactly `expires_at` it has lapsed: the expiry is when the span frees up."""
        return (
            self.status == ReservationStatus.HELD and self.expires_at is not None and self.expires_at <= now
        )

    def status_at(self, now: datetime) -> str:
        """The status a reader sees at `now`: a lapsed hold reads as expired, swept or not."""
        return ReservationStatus.EXPIRED if self.is_lapsed_at(now) else self.status

    def is_live_at(self, now: datetime) -> bool:
        """Does it block its span at `now`? Held (not lapsed) or committed."""
        return self.status in LIVE_STATUSES and not self.is_lapsed_at(now)

    def is_frozen_at(self, now: datetime) -> bool:
        """Past its bump window: no priority can take this booking over any more. Frozen from
        `bump_window_ends_at` on (the window is open while it is still ahead). A hold has no window."""
        return self.bump_window_ends_at is not None and self.bump_window_ends_at <= now

    def is_bumpable_at(self, now: datetime) -> bool:
        """May a strictly higher priority take it over at `now`? A live hold always; a commit only
        inside its bump window. (Who may take it over is the takeover rule: bookings.engine.rules.)"""
        if not self.is_live_at(now):
            return False
        return self.status == ReservationStatus.HELD or not self.is_frozen_at(now)


class UpstreamSource(models.TextChoices):
    """Where upstream busy time comes from (the provider of the synced calendar)."""

    CALDAV = "caldav"
    GOOGLE = "google"
    MICROSOFT = "microsoft"


class BusyBlock(models.Model):
    """Upstream busy time: an interval of a person's own calendar (kept in step by the sync app) that
    blocks agents exactly like a frozen booking. No priority takes it over, and there is no exclusion
    constraint between blocks and reservations: the calendar lock is the guarantee (every hold and
    commit checks blocks under it, and ingestion takes it before changing blocks).

    Blocks may overlap each other (people double-book themselves). One upstream event may give many
    blocks (a recurring series over the horizon; an event longer than MAX_RESERVATION_LENGTH is stored
    in pieces, so the bounded (calendar, start_time) overlap scan of bookings/sql.py still finds it).
    """

    calendar = models.ForeignKey(
        Calendar, on_delete=models.CASCADE, related_name="busy_blocks", db_index=False
    )
    source = models.CharField(max_length=16, choices=UpstreamSource.choices)
    # The sync connection the block came from, and the upstream event within it (no foreign key: the
    # booking engine knows blocks, not how they are synced).
    connection_id = models.BigIntegerField()
    event_key = models.CharField(max_length=1024)
    start_time = models.DateTimeField()
    end_time = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(end_time__gt=F("start_time")), name="busy_block_not_empty"),
        ]
        indexes = [
            models.Index(fields=["calendar", "start_time"], name="busy_block_cal_start"),
            models.Index(fields=["connection_id", "event_key"], name="busy_block_event"),
        ]

    def __str__(self) -> str:
        return f"{self.source} busy {self.start_time:%Y-%m-%d %H:%M}@{self.calendar_id}"

    @property
    def span(self) -> Span:
        return Span(self.start_time, self.end_time)
