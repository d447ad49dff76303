"""The meeting scenario's agents: N threads at once, each after the earliest meeting of the same people.

Two strategies, through HTTP: (i) find-and-hold, one `POST /v1/holds` with a `search`; (ii) what agents
do without it: read each calendar (its rules once, its availability on every try), intersect working
hours and free time themselves, hold the earliest common slot with `also_calendars`, and on a 409 read
again and retry, a bounded number of times.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from agentcal.clock import isoformat_z
from bench.clients import http_client
from bench.meeting_week import MEETING, intersect
from bench.scenarios import BARRIER_TIMEOUT_SECONDS, run_threads
from bench.stats import Outcome
from bookings.spans import EPOCH, Span

FIND_AND_HOLD, CLIENT_SIDE = "find_and_hold", "client_side"
STRATEGIES = (FIND_AND_HOLD, CLIENT_SIDE)
NO_SLOT = "no_slot_found"
_WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass
class AgentRun:
    """One agent's way to its meeting: every request it sent, and when (if ever) it held one."""

    outcomes: list[Outcome] = field(default_factory=list)
    held_after: float | None = None  # seconds from the start signal to the 201
    tries: int = 0  # hold attempts
    gave_up: bool = False  # every try answered 409
    no_slot: bool = False  # nothing free in common was left
    failed: str = ""  # an answer no agent expects (status and code)


@dataclass
class MeetingRun:
    agents: list[AgentRun]
    wall_seconds: float


class _Api:
    """One agent's own HTTP client to /v1, recording every request as an Outcome."""

    def __init__(self, *, base_url: str, raw_key: str, timeout: float, headers: dict[str, str]) -> None:
        self.client = http_client(
            base_url.rstrip("/") + "/v1",
            headers={"Authorization": f"Bearer {raw_key}", **headers},
            timeout=timeout,
        )
        self.run = AgentRun()

    def send(self, op: str, method: str, path: str, **kwargs: Any) -> tuple[Outcome, dict[str, Any]]:
        started = time.perf_counter()
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            outcome = Outcome(op, 0, time.perf_counter() - started, code=type(exc).__name__)
            self.run.outcomes.append(outcome)
            return outcome, {}
        seconds = time.perf_counter() - started
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        code = str(payload.get("error", "")) if response.status_code >= 400 else ""
        outcome = Outcome(op, response.status_code, seconds, code=code)
        self.run.outcomes.append(outcome)
        return outcome, payload

    def close(self) -> None:
        self.client.close()


# --- (i) find-and-hold --------------------------------------------------------------------------------------


def find_and_hold(api: _Api, calendars: Sequence[str], window: Span, started: float) -> None:
    search = {
        "calendars": list(calendars),
        "duration_minutes": int(MEETING.total_seconds() // 60),
        "start": isoformat_z(window.start),
        "end": isoformat_z(window.end),
    }
    api.run.tries = 1
    outcome, _payload = api.send("find_and_hold", "POST", "/holds", json={"search": search, "title": "sync"})
    if outcome.ok:
        api.run.held_after = time.perf_counter() - started
    elif outcome.code == NO_SLOT:
        api.run.no_slot = True
    else:
        api.run.failed = f"{outcome.status} {outcome.code}".strip()


# --- (ii) read, intersect, hold, retry ----------------------------------------------------------------------


def client_side(api: _Api, calendars: Sequence[str], window: Span, started: float, *, tries: int) -> None:
    schedules = []
    for calendar in calendars:
        outcome, payload = api.send("read_rules", "GET", f"/calendars/{calendar}")
        if not outcome.ok:
            api.run.failed = f"{outcome.status} {outcome.code}".strip()
            return
        schedules.append(working_time(payload, window))
    common_hours = intersect(schedules)
    params = {"start": isoformat_z(window.start), "end": isoformat_z(window.end)}
    for _ in range(tries):
        busy: list[Span] = []
        for calendar in calendars:
            outcome, payload = api.send(
                "read_availability", "GET", f"/calendars/{calendar}/availability", params=params
            )
            if not outcome.ok:
                api.run.failed = f"{outcome.status} {outcome.code}".strip()
                return
            busy += [
                Span(datetime.fromisoformat(e["start_time"]), datetime.fromisoformat(e["end_time"]))
                for e in payload["busy"]
            ]
        slot = earliest_free(common_hours, busy, MEETING)
        if slot is None:
            api.run.no_slot = True
            return
        api.run.tries += 1
        body = {
            "start_time": isoformat_z(slot.start),
            "end_time": isoformat_z(slot.end),
            "also_calendars": list(calendars[1:]),
            "title": "sync",
        }
        outcome, _payload = api.send("hold", "POST", f"/calendars/{calendars[0]}/holds", json=body)
        if outcome.ok:
            api.run.held_after = time.perf_counter() - started
            return
        if outcome.status != 409:
            api.run.failed = f"{outcome.status} {outcome.code}".strip()
            return
    api.run.gave_up = True


def working_time(calendar: dict[str, Any], window: Span) -> list[Span]:
    """A calendar's working time inside the window, in UTC, from the rules its GET shows: each local
    date's intervals (its override, else its weekday's) placed in the calendar's zone."""
    hours, overrides = calendar.get("working_hours"), calendar.get("date_overrides") or {}
    if hours is None and not overrides:
        return [window]
    zone = ZoneInfo(calendar["timezone"])
    day = window.start.astimezone(zone).date() - timedelta(days=1)
    spans = []
    while day <= window.end.astimezone(zone).date():
        all_day = [["00:00", "24:00"]]
        for opens, closes in overrides.get(
            day.isoformat(), hours[_WEEKDAY_NAMES[day.weekday()]] if hours else all_day
        ):
            start = max(_at(day, opens, zone), window.start)
            end = min(_at(day, closes, zone), window.end)
            if start < end:
                spans.append(Span(start, end))
        day += timedelta(days=1)
    return spans


def _at(day: date, clock: str, zone: ZoneInfo) -> datetime:
    hour, minute = (int(part) for part in clock.split(":"))
    if hour == 24:  # "24:00" is the next day's midnight
        day, hour = day + timedelta(days=1), 0
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone).astimezone(UTC)


def earliest_free(open_spans: Sequence[Span], busy: Sequence[Span], duration: timedelta) -> Span | None:
    """The earliest span of `duration` on the half-hour grid (the calendars' slot length, counted from
    the epoch as the server does) inside an open span and clear of every busy span."""
    step = MEETING.total_seconds()
    ordered = sorted(busy, key=lambda s: s.start)
    for span in open_spans:
        start = _grid_ceil(span.start, step)
        while start + duration <= span.end:
            candidate = Span(start, start + duration)
            blockers = [b.end for b in ordered if b.overlaps(candidate)]
            if not blockers:
                return candidate
            start = _grid_ceil(max(blockers), step)
    return None


def _grid_ceil(moment: datetime, step: float) -> datetime:
    return EPOCH + timedelta(seconds=math.ceil((moment - EPOCH).total_seconds() / step) * step)


# --- N agents at once ---------------------------------------------------------------------------------------


def run_agents(
    strategy: str,
    *,
    agents: int,
    base_url: str,
    key_for: Callable[[int], str],
    calendars: Sequence[str],
    window: Span,
    tries: int,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
) -> MeetingRun:
    """All agents open their client, wait for one start signal, then go after a meeting."""
    runs: list[AgentRun] = []
    start: list[float] = []
    ends: list[float] = []
    ready = threading.Barrier(agents, action=lambda: start.append(time.perf_counter()))

    def agent(index: int) -> None:
        api = _Api(base_url=base_url, raw_key=key_for(index), timeout=timeout, headers=headers or {})
        runs.append(api.run)
        try:
            ready.wait(timeout=BARRIER_TIMEOUT_SECONDS)
            if strategy == FIND_AND_HOLD:
                find_and_hold(api, calendars, window, start[0])
            else:
                client_side(api, calendars, window, start[0], tries=tries)
        finally:
            ends.append(time.perf_counter())
            api.close()

    run_threads(agents, agent)
    wall = max(ends) - start[0] if start and ends else 0.0
    return MeetingRun(runs, wall)
