"""How a moment reads to a person: in their own time zone, always named, with the exact UTC time at hand.

The one home of the rule for timestamps of people's and agents' actions (an approval asked or decided, an
audit row, a key last used): the dashboard's `{% moment %}` tag and every email build their text here.
Slots on a calendar are not moments of this kind: they read in the calendar's own zone (`zone_label`)."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

# strftime codes are avoided for names of days and months: they follow the process locale, and a date
# reads the same to every viewer here.
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
STYLES = ("datetime", "seconds", "short", "date")


# Files beside the zones in a system's zoneinfo folder that are not zones of the database: Debian's
# `localtime` links to /etc/localtime, so it would mean whatever the host's clock is set to.
_NOT_ZONES = frozenset({"localtime"})


@cache
def known_zone_names() -> frozenset[str]:
    return frozenset(available_timezones()) - _NOT_ZONES


def zone_named(name: str | None) -> ZoneInfo | None:
    """The zone of an IANA name the server knows, or None (unknown, blank, or a path-like trick)."""
    if not name or name not in known_zone_names():
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def zone_for_place(text: str) -> str | None:
    """The IANA name a person most likely meant: the name itself in any case ("europe/berlin"), or the one
    zone whose place (the last part, "Berlin" in "Europe/Berlin") it spells, ignoring case and spaces for
    underscores."""
    known = known_zone_names()
    if text in known:
        return text
    spelled = text.strip().replace(" ", "_").lower()
    by_name = {name.lower(): name for name in known}  # IANA names differ by more than case
    if spelled in by_name:
        return by_name[spelled]
    places = [name for name in known if name.rsplit("/", 1)[-1].lower() == spelled]
    return places[0] if len(places) == 1 else None


def zone_label(local: datetime) -> str:
    """The zone's abbreviation at that moment ("IST", "CET", "EDT"); zones without one ("+04") read
    as an offset from UTC ("UTC+04") rather than a bare number."""
    abbreviation = local.tzname() or "UTC"
    if abbreviation[0] in "+-":
        return f"UTC{abbreviation}"
    return abbreviation


def in_zone(value: datetime, zone: tzinfo | None) -> datetime:
    return value.astimezone(zone or UTC)


def moment_text(value: datetime, zone: tzinfo | None, style: str = "datetime") -> str:
    """`value` for a person in `zone` (UTC, labelled so, when their zone is unknown):

    datetime  "Wed 2 Dec 2026, 05:38 IST"
    seconds   "2 Dec 2026, 05:38:43 IST"   (audit rows, where order within a minute matters)
    short     "2 Dec, 05:38 IST"
    date      "2 Dec 2026 (IST)"           (the zone still named: near midnight the day differs)
    """
    local = in_zone(value, zone)
    day = f"{local.day} {_MONTHS[local.month - 1]}"
    label = zone_label(local)
    if style == "seconds":
        return f"{day} {local.year}, {local:%H:%M:%S} {label}"
    if style == "short":
        return f"{day}, {local:%H:%M} {label}"
    if style == "date":
        return f"{day} {local.year} ({label})"
    return f"{_DAYS[local.weekday()]} {day} {local.year}, {local:%H:%M} {label}"


def utc_text(value: datetime) -> str:
    """The exact moment in UTC, for a tooltip: "2026-12-02 00:08:43 UTC"."""
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def age_text(value: datetime, now: datetime) -> str:
    """A compact "3m ago"."""
    seconds = int((now - value).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 86400:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"
