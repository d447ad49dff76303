"""How values read to people on every page: provider names, lengths of time, time ranges. Pure functions
(no database, no request), shared by the view-models and the timeline."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from bookings.models import UpstreamSource

# How people name each provider ("CalDAV busy", "Microsoft 365").
PROVIDER_NAMES: dict[str, str] = {
    UpstreamSource.CALDAV: "CalDAV",
    UpstreamSource.GOOGLE: "Google",
    UpstreamSource.MICROSOFT: "Microsoft 365",
}


def provider_name(provider: str) -> str:
    return PROVIDER_NAMES.get(provider, provider)


def setting_duration(seconds: int) -> str:
    """A calendar setting's length: 30 s, 10 min, 1 h 30 min, 2 days."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    if seconds < 86400 or seconds % 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days = seconds // 86400
    return f"{days} day" + ("s" if days > 1 else "")


def local_range(start: datetime, end: datetime, zone: ZoneInfo) -> str:
    """ "Tue 3 Dec 2024, 14:00–14:30", or with both dates when it crosses midnight."""
    local_start, local_end = start.astimezone(zone), end.astimezone(zone)
    first = f"{local_start:%a} {local_start.day} {local_start:%b %Y, %H:%M}"
    if local_end.date() == local_start.date():
        return f"{first}–{local_end:%H:%M}"
    return f"{first} – {local_end:%a} {local_end.day} {local_end:%b %Y, %H:%M}"


def attendee_text(value: Any) -> str:
    """Agents write attendees as addresses or as objects ({"name", "email"}); anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        name, email = value.get("name"), value.get("email") or value.get("address")
        if isinstance(name, str) and isinstance(email, str) and name and email:
            return f"{name} <{email}>"
        if isinstance(email, str) and email:
            return email
    return json.dumps(value, ensure_ascii=False)


def number_text(value: float) -> str:
    """A limit as typed into a field: 20, 2.5, 0.01 (whole numbers without a point, no exponents)."""
    return str(int(value)) if float(value).is_integer() else str(value)


def number_words(value: float) -> str:
    """A limit as read on a page: 2,000 or 2.5."""
    return f"{int(value):,}" if float(value).is_integer() else str(value)


def holds_released(count: int) -> str:
    """What a pause that released live holds adds to its message: " 2 live holds released." (or nothing)."""
    return f" {count} live hold{'' if count == 1 else 's'} released." if count else ""
