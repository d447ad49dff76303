"""The tools that find time: the calendars, free slots, meeting times across people, and find-and-hold.

The server does every intersection (free time, working hours in each calendar's zone, buffers, notice);
these tools only add what a model needs to talk to people about a time: each attendee's local clock.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agentcal_client import AsyncAgentCal, NoSlotFound, PermissionDenied
from mcp.server.mcpserver import Context
from pydantic import AwareDatetime, Field

from agentcal_mcp import scopes
from agentcal_mcp.arguments import Attendees, BookingId, Limit, OptionalTime, Time, Title
from agentcal_mcp.registry import REGISTRY, agentcal, take
from agentcal_mcp.results import (
    BookingResult,
    BookingView,
    CalendarsResult,
    CalendarView,
    FreeSlotsResult,
    HoldView,
    Model,
    SlotView,
    ToolResult,
)

agent_tool = REGISTRY.tool

NEXT_AFTER_HOLD = (
    "The slot is yours until expires_at. Decide (ask a human with request_approval if you must), then "
    "call commit_booking with hold_id and hold_token, or release_hold if you will not use it. Need longer? "
    "Call extend_hold before expires_at."
)

RequiredCalendars = Annotated[
    list[str],
    Field(
        description="The required people's calendar ids (cal_…); a time must be free in all of them.",
        min_length=1,
        max_length=20,
    ),
]
OptionalCalendars = Annotated[
    list[str] | None,
    Field(description="Calendars of people who should come if they can.", max_length=20),
]
DurationMinutes = Annotated[int, Field(ge=1, le=10080, description="How long the meeting is.")]
WindowStart = Annotated[AwareDatetime, Field(description="Search from (RFC 3339 with an offset).")]
WindowEnd = Annotated[AwareDatetime, Field(description="Search until (RFC 3339 with an offset).")]
PreferMostOptional = Annotated[
    bool, Field(description="Put first the times most optional people can make, not the earliest.")
]


# --- What these tools answer --------------------------------------------------------------------------


class LocalTimeView(Model):
    calendar: str
    timezone: str = Field(description="The calendar's IANA time zone.")
    start_time: datetime = Field(description="The start on this person's clock (their UTC offset that day).")
    end_time: datetime


class MeetingTimeView(Model):
    start_time: datetime = Field(description="UTC.")
    end_time: datetime = Field(description="UTC.")
    optional_free: list[str] = Field(description="The optional calendars free for the whole span.")
    local_times: list[LocalTimeView] = Field(description="The same span on each attendee's own clock.")


class SearchedView(Model):
    start: datetime = Field(description="The search began here: the later of window_start and now.")
    end: datetime


class MeetingTimesResult(ToolResult):
    outcome: Literal["found", "none_free", "error"]
    calendars: list[str] = []
    candidates: list[MeetingTimeView] = []
    reasons: dict[str, bool] | None = Field(default=None, description="Why nothing was found.")


class HoldMeetingResult(ToolResult):
    outcome: Literal["held", "no_slot_found", "error"]
    hold: HoldView | None = None
    local_times: list[LocalTimeView] = Field(
        default=[], description="The held span on each attendee's own clock (hold has it in UTC)."
    )
    candidate_rank: int | None = Field(
        default=None,
        description="Which of the search's times was held: 1 is the best; higher when better ones were "
        "taken a moment earlier.",
    )
    searched: SearchedView | None = None
    reasons: dict[str, bool] | None = Field(default=None, description="Why no time suits everyone.")


class RescheduleResult(BookingResult):
    searched: SearchedView | None = None
    reasons: dict[str, bool] | None = Field(default=None, description="Why no time suits everyone.")


# --- Each attendee's clock ----------------------------------------------------------------------------

Zones = dict[str, ZoneInfo]


async def calendar_zones(client: AsyncAgentCal, calendars: list[str]) -> Zones:
    """Each calendar's time zone, read now (one GET each, concurrently: a zone can change at any time).
    A key that may not read calendars gets none: the times stay in UTC only."""

    async def zone_of(calendar: str) -> ZoneInfo | None:
        try:
            return ZoneInfo((await client.calendars.get(calendar)).timezone)
        except (PermissionDenied, ZoneInfoNotFoundError):
            return None

    unique = list(dict.fromkeys(calendars))
    found = await asyncio.gather(*(zone_of(calendar) for calendar in unique))
    return {calendar: zone for calendar, zone in zip(unique, found, strict=True) if zone is not None}


def local_times(zones: Zones, start: datetime, end: datetime) -> list[LocalTimeView]:
    return [
        LocalTimeView(
            calendar=calendar,
            timezone=str(zone),
            start_time=start.astimezone(zone),
            end_time=end.astimezone(zone),
        )
        for calendar, zone in zones.items()
    ]


_WHY_NOTHING = {
    "window_too_short": "no meeting that long fits between the window's start and end",
    "no_common_working_hours": "the required people's working hours never overlap in this window",
    "insufficient_notice": "it starts sooner than some calendars' minimum notice allows",
    "no_common_free_time": "everyone is never free at the same time within their working hours",
}


def nothing_found(nothing: NoSlotFound) -> dict[str, Any]:
    """A no_slot_found result's members: why, the window searched, and what to do next."""
    searched = nothing.searched
    return {
        "reasons": nothing.reasons,
        "searched": None if searched is None else SearchedView(start=searched.start, end=searched.end),
        "next_step": next_step_without_a_time(nothing.reasons),
    }


def next_step_without_a_time(reasons: dict[str, bool] | None) -> str:
    why = "; ".join(text for reason, text in _WHY_NOTHING.items() if (reasons or {}).get(reason))
    return (
        f"No time suits every required person{f' ({why})' if why else ''}. Nothing was held. Try a wider "
        "window (other days), a shorter meeting or fewer required people (make some optional), then search "
        "again. Never pick a time outside someone's working hours yourself."
    )


# --- The tools ----------------------------------------------------------------------------------------


@agent_tool(scope=scopes.CALENDARS_READ, title="List calendars", read_only=True, idempotent=True)
async def list_calendars(ctx: Context, limit: Limit = 50) -> CalendarsResult:
    """List the calendars of your workspace with their ids (cal_…), time zones and rules.

    Use it first when you do not know a calendar's id. Next: find_meeting_time (or hold_meeting) on the
    calendars of the people who should meet.
    """
    calendars, more = await take(agentcal(ctx).calendars.list(limit=limit + 1), limit)
    return CalendarsResult(
        outcome="listed",
        calendars=[CalendarView.of(calendar) for calendar in calendars],
        more=more,
        next_step="Call find_meeting_time with the ids of the calendars the meeting needs.",
    )


@agent_tool(scope=scopes.BOOKINGS_READ, title="Find free slots", read_only=True, idempotent=True)
async def find_free_slots(
    ctx: Context,
    calendars: Annotated[
        list[str],
        Field(
            description="Calendar ids (cal_…); a slot must be free in all of them.",
            min_length=1,
            max_length=20,
        ),
    ],
    duration_minutes: DurationMinutes,
    window_start: WindowStart,
    window_end: WindowEnd,
    max_slots: Annotated[int, Field(ge=1, le=20, description="Return at most this many slots.")] = 5,
) -> FreeSlotsResult:
    """Find slots of `duration_minutes` that are free in every given calendar within a window (and inside
    their working hours).

    Use it before hold_slot. Reading is not reserving: another agent may take a slot a moment later,
    so hold the one you want next, right away. Slots are in UTC, earliest first.
    """
    found = await agentcal(ctx).find_meeting_time(
        calendars, timedelta(minutes=duration_minutes), window_start, window_end, limit=max_slots
    )
    if not found.candidates:
        return FreeSlotsResult(
            outcome="none_free",
            calendars=calendars,
            next_step="Nothing is free for that long in all these calendars: try a wider window, a shorter "
            "meeting or fewer calendars.",
        )
    return FreeSlotsResult(
        outcome="found",
        calendars=calendars,
        slots=[SlotView(start_time=c.start_time, end_time=c.end_time) for c in found.candidates],
        next_step="Call hold_slot now with the first calendar, the other calendars as also_calendars, and "
        "one slot's start_time and end_time.",
    )


@agent_tool(scope=scopes.BOOKINGS_READ, title="Find a meeting time", read_only=True, idempotent=True)
async def find_meeting_time(
    ctx: Context,
    calendars: RequiredCalendars,
    duration_minutes: DurationMinutes,
    window_start: WindowStart,
    window_end: WindowEnd,
    optional_calendars: OptionalCalendars = None,
    prefer_most_optional: PreferMostOptional = False,
    max_times: Annotated[int, Field(ge=1, le=50, description="Return at most this many times.")] = 5,
) -> MeetingTimesResult:
    """Find times of `duration_minutes` free for every required person, inside each one's working hours in
    their own time zone (the server intersects their calendars), and say which optional people are free.

    Each time is in UTC and in every attendee's local time (`local_times`): quote the local time when you
    talk to a person. Reading is not reserving: to take a time, call hold_meeting (it finds and holds the
    best time in one step) or hold_slot with one of these times, right away.
    """
    client = agentcal(ctx)
    zones = await calendar_zones(client, [*calendars, *(optional_calendars or [])])
    found = await client.find_meeting_time(
        calendars,
        timedelta(minutes=duration_minutes),
        window_start,
        window_end,
        optional_calendars=optional_calendars,
        limit=max_times,
        order="most_optional" if prefer_most_optional else "earliest",
    )
    if not found.candidates:
        return MeetingTimesResult(
            outcome="none_free",
            calendars=calendars,
            reasons=found.reasons,
            next_step=next_step_without_a_time(found.reasons),
        )
    return MeetingTimesResult(
        outcome="found",
        calendars=calendars,
        candidates=[
            MeetingTimeView(
                start_time=c.start_time,
                end_time=c.end_time,
                optional_free=list(c.optional_free),
                local_times=local_times(zones, c.start_time, c.end_time),
            )
            for c in found.candidates
        ],
        next_step="Call hold_meeting with the same arguments to hold the best time for everyone, or "
        "hold_slot with the first calendar, the others as also_calendars, and one time's start and end.",
    )


@agent_tool(scope=scopes.BOOKINGS_WRITE, title="Hold a meeting time")
async def hold_meeting(
    ctx: Context,
    calendars: RequiredCalendars,
    duration_minutes: DurationMinutes,
    window_start: WindowStart,
    window_end: WindowEnd,
    optional_calendars: OptionalCalendars = None,
    prefer_most_optional: PreferMostOptional = False,
    ttl_seconds: Annotated[
        int | None,
        Field(ge=1, le=3600, description="How long the hold lives; omit for the calendars' default."),
    ] = None,
    title: Title = None,
    attendees: Attendees = None,
) -> HoldMeetingResult:
    """Find the best time for every required person and hold it on all their calendars in one step: no
    one can take it between finding and holding. Times respect each person's working hours in their own
    time zone, their buffers and minimum notice; nothing anyone holds is taken over.

    The answer has the hold (keep `hold.id` and `hold.hold_token` for commit_booking) with its times in
    UTC, and `local_times`: the same span on each attendee's clock. If no time suits everyone, the outcome
    is "no_slot_found" with `reasons`: follow next_step (nothing was held).
    """
    client = agentcal(ctx)
    # Read before the write: a hold answered without its local times would be a hold the agent
    # cannot describe to people.
    zones = await calendar_zones(client, [*calendars, *(optional_calendars or [])])
    try:
        hold = await client.hold_meeting(
            calendars,
            timedelta(minutes=duration_minutes),
            window_start,
            window_end,
            optional_calendars=optional_calendars,
            order="most_optional" if prefer_most_optional else "earliest",
            ttl_seconds=ttl_seconds,
            title=title,
            attendees=attendees,
        )
    except NoSlotFound as nothing:
        return HoldMeetingResult(outcome="no_slot_found", **nothing_found(nothing))
    return HoldMeetingResult(
        outcome="held",
        hold=HoldView.of(hold),
        local_times=local_times(zones, hold.start_time, hold.end_time),
        candidate_rank=hold.candidate_rank,
        searched=SearchedView(start=hold.searched.start, end=hold.searched.end),
        next_step=NEXT_AFTER_HOLD,
    )


@agent_tool(scope=scopes.BOOKINGS_WRITE, title="Reschedule to the earliest time that suits everyone")
async def reschedule_to_earliest(
    ctx: Context, booking_id: BookingId, after: Time, before: OptionalTime = None
) -> RescheduleResult:
    """Move one of your bookings to the earliest time after `after` (and ending by `before`, default two
    weeks later) that suits every one of its calendars — their working hours in their own zones, notice,
    buffers and busy time — for as long as it lasts now. The server finds the time and moves the booking
    in one locked write: same booking id, invites already sent are updated. Nothing changes if there is
    no such time. Use it when a person asks to push a meeting "to later this week" or after a bump."""
    client = agentcal(ctx)
    try:
        booking = await client.reschedule_booking(
            booking_id, after=after, before=before or after + timedelta(days=14)
        )
    except NoSlotFound as nothing:
        return RescheduleResult(outcome="no_slot_found", **nothing_found(nothing))
    return RescheduleResult(
        outcome="rescheduled",
        booking=BookingView.of(booking),
        next_step="Rescheduled: same booking id, new span. Invites already sent are updated.",
    )
