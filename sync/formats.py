"""What a logged payload means, per provider: its version markers, and the iCalendar data the busy
time is computed from (sync.ical is the one place recurrences are expanded, for every provider).

CalDAV payloads are iCalendar already. Google Calendar payloads are events.list items (JSON): a
recurring series is a master (with `recurrence` lines, which are iCalendar RRULE/RDATE/EXDATE) and
its exceptions (`recurringEventId`, `originalStartTime`; a cancelled instance has status
`cancelled`). They become one VCALENDAR: the master, and each exception as
an override with RECURRENCE-ID, so Google series expand exactly like CalDAV ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sync.ical import InvalidCalendarData, event_version
from sync.models import Provider

_ICS_DATETIME = "%Y%m%dT%H%M%S"
# Google marks the calendar owner's own attendance (`self: true`); a declined one is written as this
# attendee, which sync.ingest counts among the owner's addresses.
SELF_ADDRESS = "self@agentcal.invalid"


@dataclass(frozen=True)
class Version:
    uid: str
    sequence: int | None
    modified: datetime | None


def version_of(provider: str, payload: str) -> Version:
    """The version markers of a logged resource; raises InvalidCalendarData if they cannot be read."""
    if provider == Provider.GOOGLE:
        item = _json(payload)
        updated = item.get("updated")
        return Version(
            # The series' key: a master's id, which its exceptions name as recurringEventId (a deleted
            # exception may come without its iCalUID).
            uid=str(item.get("recurringEventId") or item.get("id") or ""),
            sequence=int(item.get("sequence") or 0),
            modified=_instant(updated) if isinstance(updated, str) else None,
        )
    version = event_version(payload)
    return Version(uid=version.uid, sequence=version.sequence, modified=version.modified)


def is_series_part(provider: str, payload: str) -> bool:
    """An exception of a recurring series (its busy time is computed with its series' master)."""
    return provider == Provider.GOOGLE and bool(_json(payload).get("recurringEventId"))


def as_icalendar(provider: str, payload: str, siblings: Sequence[str] = ()) -> str:
    """iCalendar data for a resource: CalDAV's as it is; a Google master with its exceptions
    (`siblings`: the payloads of the other resources sharing its iCalUID)."""
    if provider != Provider.GOOGLE:
        return payload
    master = _json(payload)
    exceptions = [item for item in map(_json, siblings) if item.get("recurringEventId") == master.get("id")]
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//AgentCal//Google Calendar import//EN"]
    uid = str(master.get("iCalUID") or master.get("id") or "")
    lines += _vevent(master, uid=uid)
    for exception in exceptions:
        lines += _vevent(exception, uid=uid, recurrence_of=master)
    lines.append("END:VCALENDAR")
    return "\r\n".join(lines) + "\r\n"


def _vevent(item: dict[str, Any], *, uid: str, recurrence_of: dict[str, Any] | None = None) -> list[str]:
    zone = _zone(
        item.get("start", {}).get("timeZone") or (recurrence_of or {}).get("start", {}).get("timeZone")
    )
    lines = ["BEGIN:VEVENT", f"UID:{_text(uid)}"]
    lines.append(f"DTSTAMP:{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
    lines.append(f"SEQUENCE:{int(item.get('sequence') or 0)}")
    if recurrence_of is not None:
        lines.append(_when("RECURRENCE-ID", item.get("originalStartTime") or {}, zone))
    if item.get("status") == "cancelled":
        lines.append("STATUS:CANCELLED")
    if recurrence_of is not None and item.get("status") == "cancelled":
        # A cancelled instance may come without start/end; the override only needs to name it.
        lines.append(_when("DTSTART", item.get("originalStartTime") or {}, zone))
    else:
        lines.append(_when("DTSTART", item.get("start") or {}, zone))
        lines.append(_when("DTEND", item.get("end") or {}, zone))
    if item.get("transparency") == "transparent":
        lines.append("TRANSP:TRANSPARENT")
    for attendee in item.get("attendees") or []:
        if attendee.get("self") and attendee.get("responseStatus") == "declined":
            lines.append(f"ATTENDEE;PARTSTAT=DECLINED:mailto:{SELF_ADDRESS}")
    booking = ((item.get("extendedProperties") or {}).get("private") or {}).get("agentcalBooking")
    if booking:
        lines.append(f"X-AGENTCAL-BOOKING:{_text(booking)}")
    if recurrence_of is None:
        lines += [str(rule) for rule in item.get("recurrence") or [] if "\n" not in str(rule)]
    lines.append("END:VEVENT")
    return lines


def _when(name: str, value: dict[str, Any], zone: ZoneInfo | None) -> str:
    """A Google start/end/originalStartTime as an iCalendar property: all-day as a DATE, a time in the
    event's own zone (TZID) so a series keeps its local time across DST."""
    if "date" in value:
        return f"{name};VALUE=DATE:{date.fromisoformat(value['date']):%Y%m%d}"
    if "dateTime" not in value:
        raise InvalidCalendarData(f"{name.lower()} has neither date nor dateTime")
    moment = _instant(value["dateTime"])
    if zone is None:
        return f"{name}:{moment.astimezone(UTC):{_ICS_DATETIME}}Z"
    return f"{name};TZID={zone.key}:{moment.astimezone(zone):{_ICS_DATETIME}}"


def _zone(name: str | None) -> ZoneInfo | None:
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None  # an unknown zone: the instant in UTC still blocks the right time (once)


def _instant(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidCalendarData(f"not a date-time: {value!r}") from exc
    if moment.tzinfo is None:
        raise InvalidCalendarData(f"a date-time without an offset: {value!r}")
    return moment


def _json(payload: str) -> dict[str, Any]:
    try:
        item = json.loads(payload)
    except ValueError as exc:
        raise InvalidCalendarData("not JSON") from exc
    if not isinstance(item, dict):
        raise InvalidCalendarData("not a JSON object")
    return item


def _text(value: Any) -> str:
    """A property value on one line (no injection of further properties)."""
    return str(value).replace("\r", " ").replace("\n", " ")
