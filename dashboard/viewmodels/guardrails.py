"""What the agents pages say of the guardrails: each limit in force and who set it, what an agent uses of
its budgets now, the limits agents met lately (the notices), and what a pause would release."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from dashboard.forms import LimitsForm
from dashboard.wording import number_words
from guardrails.models import LIMIT_WORDS, LimitNotice
from guardrails.selectors import (
    Origin,
    Setting,
    agent_limit_settings,
    agent_usage,
    open_notices,
    workspace_limit_settings,
)
from guardrails.services import LIMIT_BOUNDS
from workspaces.models import Agent, Workspace

# Each limit as the pages name it, the unit its number is in, and what it counts.
LIMIT_LABELS: dict[str, tuple[str, str, str]] = {
    "requests_per_second": (
        "Request rate",
        "a second",
        "Every API request, refilled steadily: over it the agent is told to retry (429).",
    ),
    "request_burst": ("Burst", "requests", "How many requests may come at once before the rate applies."),
    "searches_per_minute": ("Searches", "a minute", "Availability searches and free-slot lookups."),
    "live_holds": ("Live holds", "at once", "Holds not yet booked, released or lapsed."),
    "bookings_per_day": ("Bookings", "a day", "Bookings made since midnight UTC."),
}
AGENT_ORIGINS = {
    Origin.AGENT: "this agent",
    Origin.WORKSPACE: "workspace default",
    Origin.INSTALLATION: "installation default",
}
WORKSPACE_ORIGINS = {Origin.WORKSPACE: "this workspace", Origin.INSTALLATION: "installation default"}


@dataclass(frozen=True)
class LimitRow:
    name: str
    label: str
    unit: str
    hint: str
    value: str  # in force, as read: "2,000"
    origin: str  # Origin's value, for styling and tests
    origin_label: str
    inherited: str  # what a blank field means
    field: Any  # the bound form field
    low: float
    high: float
    step: str


def limit_rows(settings: list[Setting], form: LimitsForm, origins: dict[Origin, str]) -> list[LimitRow]:
    rows = []
    for setting in settings:
        label, unit, hint = LIMIT_LABELS[setting.name]
        low, high = LIMIT_BOUNDS[setting.name]
        rows.append(
            LimitRow(
                name=setting.name,
                label=label,
                unit=unit,
                hint=hint,
                value=number_words(setting.value),
                origin=setting.origin.value,
                origin_label=origins[setting.origin],
                inherited=number_words(setting.inherited),
                field=form[setting.name],
                low=low,
                high=high,
                step="any" if setting.name == "requests_per_second" else "1",
            )
        )
    return rows


@dataclass(frozen=True)
class Meter:
    label: str
    used: int
    limit: int

    @property
    def full(self) -> bool:
        return self.used >= self.limit

    @property
    def text(self) -> tuple[str, str]:
        return number_words(self.used), number_words(self.limit)


def agent_limits_context(agent: Agent, workspace: Workspace, form: LimitsForm | None) -> dict[str, Any]:
    """The agent page's Limits section: a row per limit, meters for its budgets, its open notices."""
    settings = agent_limit_settings(agent, workspace)
    in_force = {setting.name: int(setting.value) for setting in settings}
    usage = agent_usage(agent)
    return {
        "limit_rows": limit_rows(settings, form or LimitsForm.of(settings), AGENT_ORIGINS),
        "limit_meters": [
            Meter("Live holds now", usage.live_holds, in_force["live_holds"]),
            Meter("Bookings today (UTC)", usage.bookings_today, in_force["bookings_per_day"]),
        ],
        "notices": notice_lines(open_notices(workspace, agent=agent)),
        "live_holds": usage.live_holds,
    }


def workspace_limits_context(workspace: Workspace, form: LimitsForm | None) -> dict[str, Any]:
    settings = workspace_limit_settings(workspace)
    return {"limit_rows": limit_rows(settings, form or LimitsForm.of(settings), WORKSPACE_ORIGINS)}


@dataclass
class NoticeLine:
    """One agent's notices: "SDR bot reached its request rate today and its live holds at once on 1 Dec"."""

    agent: Agent
    phrases: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        reached = self.phrases[0] if len(self.phrases) == 1 else ", ".join(self.phrases[:-1])
        if len(self.phrases) > 1:
            reached += f" and {self.phrases[-1]}"
        return f"{self.agent.name} reached {reached}."


def notice_lines(notices: Iterable[LimitNotice], today: date | None = None) -> list[NoticeLine]:
    """One line per agent, newest first, each limit once (the latest day it was met)."""
    today = today or datetime.now(UTC).date()
    lines: dict[int, NoticeLine] = {}
    for notice in notices:  # newest first
        line = lines.setdefault(notice.agent_id, NoticeLine(notice.agent))
        if notice.limit in line.limits:
            continue
        line.limits.append(notice.limit)
        line.phrases.append(f"{LIMIT_WORDS.get(notice.limit, notice.limit)} {day_words(notice.day, today)}")
    return list(lines.values())


def day_words(day: date, today: date) -> str:
    if day == today:
        return "today"
    if day == today - timedelta(days=1):
        return "yesterday"
    return f"on {day:%a} {day.day} {day:%b}"
