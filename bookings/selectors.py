"""Reads that several places need: availability, reservation groups, and what the dashboard's calendar
and approval pages show of calendars, reservations and busy time."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Q
from django.db.models.functions import Now

from agentcal.db import bound_cursor, loaded
from bookings.models import LIVE_STATUSES, BusyBlock, Calendar, Reservation, overlapping_q
from bookings.rules import blocked_time
from bookings.spans import BusyIndex, Span, grid_slots
from workspaces.models import Agent, Workspace

MAX_AVAILABILITY_WINDOW = timedelta(days=62)
MAX_FREE_SLOTS = 500


@dataclass
class Availability:
    busy: list[Reservation]
    upstream: list[BusyBlock]
    free_slots: list[Span]
    version: int
    server_time: datetime


def availability(*, calendar: Calendar, window: Span, duration: timedelta | None) -> Availability:
    """Busy reservations, upstream busy blocks and free time in `window` (within the calendar's rules),
    with the calendar version they correspond to.

    Read in one REPEATABLE READ snapshot so the version (the ETag an agent may send back as If-Match)
    describes exactly the busy list returned. Lapsed holds are left out whether or not anything has
    expired them yet.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cursor.execute("SELECT version, now() FROM bookings_calendar WHERE id = %s", [calendar.pk])
            version, now = cursor.fetchone()
        busy = list(
            Reservation.objects.live()
            .overlapping(window)
            .filter(calendar=calendar)
            .select_related("agent")
            .order_by("start_time")
        )
        upstream = list(
            BusyBlock.objects.filter(overlapping_q(window), calendar=calendar).order_by("start_time")
        )
    bookable = Span(max(window.start, now), window.end) if window.end > now else None
    taken = [*((r.start_time, r.end_time) for r in busy), *((b.start_time, b.end_time) for b in upstream)]
    # Free time is what a hold could take: the calendar's rules (hours, buffers, notice) close the rest.
    index = BusyIndex.from_bounds(blocked_time(calendar, taken, bookable, now) if bookable else taken)
    if bookable is None:
        free: list[Span] = []
    elif duration is None:
        free = index.gaps(bookable)
    else:
        free = grid_slots(
            window=bookable,
            duration=duration,
            slot_minutes=calendar.slot_minutes,
            busy=index,
            limit=MAX_FREE_SLOTS,
        )
    return Availability(busy=busy, upstream=upstream, free_slots=free, version=version, server_time=now)


def reservation_group(
    *, workspace: Workspace, known: tuple[Calendar, Agent] | None = None, **lookup: Any
) -> list[Reservation]:
    """All rows of one hold or booking in the workspace, primary first (empty if none).
    `lookup`: exactly one of hold_id=, booking_id=, or hold_token_hash= (of the hold's token).
    `known`: a calendar and an agent the caller already holds: rows on that calendar (if it is the
    workspace's) and of that agent get these instances instead of their columns read again."""
    ((name, value),) = lookup.items()
    if name == "hold_token_hash":
        # A token belongs to the primary row; the group is every row sharing its hold_id.
        where = (
            "r.hold_id = (SELECT hold_id FROM bookings_reservation"
            " WHERE hold_token_hash = %(value)s AND is_primary)"
        )
    elif name in ("hold_id", "booking_id"):
        where = f"r.{name} = %(value)s"
    elif name == "hold_id__in":
        where, value = "r.hold_id = ANY(%(value)s)", list(value)
    else:
        raise TypeError(f"reservation_group() cannot look up by {name}")
    params = {"value": value, "workspace": workspace.pk}
    if known is None or known[0].workspace_id != workspace.pk:
        return reservation_rows(f"{where} AND c.workspace_id = %(workspace)s", params)
    calendar, agent = known
    params |= {"calendar": calendar.pk, "agent": agent.pk}
    with bound_cursor() as cursor:
        cursor.execute(f"{_ROWS_BESIDE_KNOWN} WHERE {where} AND {_IN_WORKSPACE_BESIDE_KNOWN}", params)
        found = cursor.fetchall()
    return _primary_first(reservation_rows_from(found, known=known))


# Hand-written (the group is read on every commit, release, cancel and GET): the ORM spent longer
# compiling the select_related query than the database spent running it.
_LOADED = (Reservation, Calendar, Agent)
_FIELDS = [list(model._meta.concrete_fields) for model in _LOADED]
_ATTNAMES = [[f.attname for f in fields] for fields in _FIELDS]
# The columns and joins of a reservation read with its calendar and agent (`r`, `c`, `a`); rows of them
# become instances through reservation_rows_from().
RESERVATION_ROW_COLUMNS = ", ".join(
    f"{alias}.{field.column}" for alias, fields in zip("rca", _FIELDS, strict=True) for field in fields
)
RESERVATION_ROW_WIDTH = sum(len(fields) for fields in _FIELDS)
RESERVATION_ROW_JOINS = (
    "JOIN bookings_calendar c ON c.id = r.calendar_id JOIN workspaces_agent a ON a.id = r.agent_id"
)
# The same columns beside a known calendar and agent: theirs come back NULL (a commit reads its hold's
# rows on the calendar the request named, made by the agent that sent it: half the columns, two fewer
# instances). The known calendar is the workspace's (checked before); any other must be.
_ROWS_BESIDE_KNOWN = (
    f"SELECT {RESERVATION_ROW_COLUMNS} FROM bookings_reservation r"
    " LEFT JOIN bookings_calendar c ON c.id = r.calendar_id AND r.calendar_id <> %(calendar)s"
    " LEFT JOIN workspaces_agent a ON a.id = r.agent_id AND r.agent_id <> %(agent)s"
)
_IN_WORKSPACE_BESIDE_KNOWN = "(r.calendar_id = %(calendar)s OR c.workspace_id = %(workspace)s)"


def reservation_rows(where: str, params: dict[str, Any]) -> list[Reservation]:
    """Reservations (with their calendar and agent loaded) matching a condition on `r` (reservation),
    `c` (calendar) or `a` (agent), primary first, then by calendar id."""
    with bound_cursor() as cursor:
        cursor.execute(
            f"SELECT {RESERVATION_ROW_COLUMNS} FROM bookings_reservation r {RESERVATION_ROW_JOINS}"
            f" WHERE {where}",
            params,
        )
        found = cursor.fetchall()
    return _primary_first(reservation_rows_from(found))


def _primary_first(rows: list[Reservation]) -> list[Reservation]:
    return sorted(rows, key=lambda r: (not r.is_primary, r.calendar_id))


def reservation_rows_from(
    found: Iterable[Sequence[Any]], *, known: tuple[Calendar, Agent] | None = None
) -> list[Reservation]:
    """Instances from rows of RESERVATION_ROW_COLUMNS, in the order given; `known` stands in for a
    calendar or agent whose columns came back NULL (reservation_group)."""
    known_calendar, known_agent = known or (None, None)
    rows = []
    for values in found:
        reservation, calendar, agent = _instances(values)
        reservation.calendar = calendar or known_calendar
        reservation.agent = agent or known_agent
        rows.append(reservation)
    return rows


def _instances(values: Sequence[Any]) -> list[Any]:
    """One instance per model in _LOADED from a row of RESERVATION_ROW_COLUMNS read by bound_cursor()
    (binary results: JSON columns arrive decoded, so no ORM converter is needed); None for a model
    whose columns are all NULL (its id is)."""
    instances, start = [], 0
    for model, names in zip(_LOADED, _ATTNAMES, strict=True):
        part = values[start : start + len(names)]
        instances.append(None if part[0] is None else loaded(model, names, part))
        start += len(names)
    return instances


_CALENDAR_ATTNAMES = _ATTNAMES[_LOADED.index(Calendar)]  # a calendar's attnames are its column names
_CALENDAR_SQL = (
    f"SELECT {', '.join(_CALENDAR_ATTNAMES)} FROM bookings_calendar"
    " WHERE workspace_id = %(workspace)s AND public_id = %(public_id)s"
)


def calendar_in_workspace(*, workspace_id: int, public_id: str) -> Calendar | None:
    """The calendar with this public id in the workspace (read on every agent request: hand-written)."""
    with bound_cursor() as cursor:
        cursor.execute(_CALENDAR_SQL, {"workspace": workspace_id, "public_id": public_id})
        row = cursor.fetchone()
    return None if row is None else loaded(Calendar, _CALENDAR_ATTNAMES, row)


# --- What people's pages read -----------------------------------------------------------------------------


@dataclass
class CalendarWindow:
    """A calendar's reservations and busy blocks overlapping a window of its timeline."""

    reservations: list[Reservation]  # with their agent, by start
    ended_left_out: int  # reservations not loaded because they have ended (0 when ended ones were asked for)
    busy_blocks: list[BusyBlock]


def calendar_window(*, calendar: Calendar, window: Span, with_ended: bool) -> CalendarWindow:
    in_range = Reservation.objects.filter(overlapping_q(window), calendar=calendar)
    candidates = in_range if with_ended else in_range.filter(status__in=LIVE_STATUSES)
    reservations = list(candidates.select_related("agent").order_by("start_time", "id"))
    ended_left_out = 0 if with_ended else in_range.exclude(status__in=LIVE_STATUSES).count()
    # The bounded overlap filter: blocks are stored in pieces no longer than a reservation for it.
    busy_blocks = list(BusyBlock.objects.filter(overlapping_q(window), calendar=calendar))
    return CalendarWindow(reservations=reservations, ended_left_out=ended_left_out, busy_blocks=busy_blocks)


def reservation_on_calendar(calendar: Calendar, reservation_id: str) -> Reservation | None:
    """The calendar's share of a hold or booking, by either id (a hold's id finds the booking it became)."""
    return (
        Reservation.objects.select_related("agent", "calendar")
        .filter(Q(hold_id=reservation_id) | Q(booking_id=reservation_id), calendar=calendar)
        .first()
    )


def reservation_other_shares(reservation: Reservation) -> list[Reservation]:
    """The same hold's rows on its other calendars, by calendar name."""
    return list(
        Reservation.objects.filter(hold_id=reservation.hold_id)
        .exclude(pk=reservation.pk)
        .select_related("calendar")
        .order_by("calendar__name")
    )


def reservation_displacer(reservation: Reservation) -> Reservation | None:
    """The reservation that took this one over, if one did."""
    if not reservation.displaced_by_id:
        return None
    return Reservation.objects.filter(pk=reservation.displaced_by_id).first()


def hold_primary(workspace: Workspace, hold_id: str) -> Reservation | None:
    """A hold's primary row (or the booking's it became), with its calendar; None if not in the workspace."""
    return (
        Reservation.objects.select_related("calendar")
        .filter(hold_id=hold_id, is_primary=True, calendar__workspace=workspace)
        .first()
    )


def hold_primaries(workspace: Workspace, hold_ids: list[str]) -> list[Reservation]:
    """hold_primary() of many holds, in one query."""
    return list(
        Reservation.objects.filter(
            hold_id__in=hold_ids, is_primary=True, calendar__workspace=workspace
        ).select_related("calendar")
    )


def hold_shares(*, workspace_id: int, hold_id: str) -> list[Reservation]:
    """Every row of a hold in the workspace with its calendar, agent and whoever took it over: primary
    first, then by calendar name."""
    rows = (
        Reservation.objects.filter(hold_id=hold_id, calendar__workspace_id=workspace_id)
        .select_related("calendar", "agent", "displaced_by__agent")
        .order_by("id")
    )
    return sorted(rows, key=lambda r: (not r.is_primary, r.calendar.name, r.pk))


def busy_blocks_over(span: Span, calendar_ids: list[int]) -> list[BusyBlock]:
    """The calendars' busy blocks overlapping `span`, by start."""
    return list(
        BusyBlock.objects.filter(overlapping_q(span), calendar_id__in=calendar_ids).order_by("start_time")
    )


def agent_reservation_counts(agent_ids: Iterable[int]) -> list[Any]:
    """Per agent (`agent_id`): its holds, its bookings, and the bookings that began as its holds. One row
    per hold or booking (a multi-calendar hold has a row per calendar; its primary counts); holds carry a
    hold-token hash, direct commits do not."""
    return list(
        Reservation.objects.filter(agent__in=agent_ids, is_primary=True)
        .values("agent_id")
        .annotate(
            holds=Count("id", filter=Q(hold_token_hash__isnull=False)),
            commits=Count("id", filter=Q(committed_at__isnull=False)),
            commits_from_holds=Count(
                "id", filter=Q(hold_token_hash__isnull=False, committed_at__isnull=False)
            ),
        )
    )


def workspace_hold_counts(workspace: Workspace, *, placed_within: timedelta) -> dict[str, int]:
    """The workspace's holds placed in the last `placed_within` (database clock) and how many of them have
    become bookings: the same rows and filters as `agent_reservation_counts`, over a window."""
    return Reservation.objects.filter(
        calendar__workspace=workspace,
        is_primary=True,
        hold_token_hash__isnull=False,
        created_at__gt=Now() - placed_within,
    ).aggregate(holds=Count("id"), commits_from_holds=Count("id", filter=Q(committed_at__isnull=False)))


def first_calendar(workspace: Workspace) -> Calendar | None:
    """The workspace's oldest calendar."""
    return Calendar.objects.filter(workspace=workspace).order_by("id").first()


def newest_reservation(workspace: Workspace) -> Reservation | None:
    """The workspace's newest hold or booking (its primary row), with its calendar."""
    return (
        Reservation.objects.filter(calendar__workspace=workspace, is_primary=True)
        .select_related("calendar")
        .order_by("-id")
        .first()
    )


def primaries_by_id(workspace: Workspace, public_ids: set[str]) -> dict[str, Reservation]:
    """The primary rows of the holds or bookings `public_ids` in the workspace, with their calendars, by
    both the hold's id and the booking's."""
    found: dict[str, Reservation] = {}
    for reservation in (
        Reservation.objects.filter(Q(hold_id__in=public_ids) | Q(booking_id__in=public_ids))
        .filter(calendar__workspace=workspace, is_primary=True)
        .select_related("calendar")
    ):
        found[reservation.hold_id] = reservation
        if reservation.booking_id:
            found[reservation.booking_id] = reservation
    return found


def calendar_names(workspace: Workspace) -> dict[str, str]:
    """Every calendar's name by public id, in order of name."""
    return {c.public_id: c.name for c in Calendar.objects.filter(workspace=workspace).order_by("name")}
