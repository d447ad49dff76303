"""What a logged payload means, per provider: its version markers, and the iCalendar data the busy
time is computed from (sync.ical is the one place recurrences are expanded, for every provider).
CalDAV payloads are iCalendar already; a Google series (a master and its exceptions) becomes one
VCALENDAR with RECURRENCE-ID overrides; each Microsoft 365 instance becomes a VCALENDAR of one VEVENT.

Design: docs/architecture.md, "Upstream sync" (what each provider's payload holds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sync.ical import InvalidCalendarData, event_version
from sync.models import Provider
from sync.providers.microsoft_client import transaction_id_for

_ICS_DATETIME = "%Y%m%dT%H%M%S"
# Google marks the calendar owner's own attendance (`self: true`), Graph gives it as the event's
# `responseStatus`; a declined one is written as this attendee, which sync.ingest counts among the
# owner's addresses.
SELF_ADDRESS = "self@agentcal.invalid"
# Our bookings' copies in Microsoft 365 carry this line in their body (sync.providers.microsoft writes
# it): the calendarView delta returns the body but cannot $expand extended properties, so the body is
# where the echo of a booking can be recognised without a request per event. Graph may hand the body
# back as HTML, hence the tolerance for markup-escaped spaces around the id.
MICROSOFT_BOOKING_LINE = "AgentCal booking: {booking_id}"
_MICROSOFT_BOOKING = re.compile(r"AgentCal booking:(?:\s|&nbsp;|&#160;)*(bk_[a-z0-9]{1,29})\b")
# Graph's showAs values that leave the time free for other meetings.
_MICROSOFT_FREE = {"free", "workingElsewhere"}


@dataclass(frozen=True)
class Version:
    uid: str
    sequence: int | None
    modified: datetime | None


def version_of(provider: str, payload: str) -> Version:
    """The version markers of a logged resource; raises InvalidCalendarData if they cannot be read."""
    if provider == Provider.MICROSOFT:
        item = _json(payload)
        modified = item.get("lastModifiedDateTime")
        return Version(
            # An occurrence or exception names its series (the log shows which instances belong
            # together); each instance is still its own resource, blocking on its own.
            uid=str(item.get("seriesMasterId") or item.get("id") or ""),
            sequence=0,  # Graph has no sequence: the modification time orders versions
            modified=_instant(modified) if isinstance(modified, str) else None,
        )
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
    (`siblings`: the payloads of the other resources sharing its iCalUID); a Microsoft instance alone."""
    if provider == Provider.MICROSOFT:
        return _microsoft_vcalendar(_json(payload))
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


def _microsoft_vcalendar(item: dict[str, Any]) -> str:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//AgentCal//Microsoft 365 import//EN", "BEGIN:VEVENT"]
    lines.append(f"UID:{_text(item.get('iCalUId') or item.get('id') or '')}")
    lines.append(f"DTSTAMP:{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
    all_day = bool(item.get("isAllDay"))
    lines.append(_graph_when("DTSTART", item.get("start"), all_day=all_day))
    lines.append(_graph_when("DTEND", item.get("end"), all_day=all_day))
    if item.get("isCancelled"):
        lines.append("STATUS:CANCELLED")
    if item.get("showAs") in _MICROSOFT_FREE:
        lines.append("TRANSP:TRANSPARENT")
    if (item.get("responseStatus") or {}).get("response") == "declined":
        lines.append(f"ATTENDEE;PARTSTAT=DECLINED:mailto:{SELF_ADDRESS}")
    booking = microsoft_booking_id(item)
    if booking:
        lines.append(f"X-AGENTCAL-BOOKING:{_text(booking)}")
    lines += ["END:VEVENT", "END:VCALENDAR"]
    return "\r\n".join(lines) + "\r\n"


def microsoft_booking_id(item: dict[str, Any]) -> str | None:
    """The booking a Graph event is the copy of: the body line we wrote, confirmed by the transactionId
    we created it with when Graph returns one (a line pasted into someone else's event is not ours)."""
    body = item.get("body")
    content = body.get("content") if isinstance(body, dict) else None
    found = _MICROSOFT_BOOKING.search(content) if isinstance(content, str) else None
    if found is None:
        return None
    transaction_id = item.get("transactionId")
    if transaction_id and transaction_id != transaction_id_for(found.group(1)):
        return None
    return found.group(1)


def _graph_when(name: str, value: Any, *, all_day: bool) -> str:
    """A Graph dateTimeTimeZone ({"dateTime": "2030-01-01T09:00:00.0000000", "timeZone": "UTC"}) as an
    iCalendar property: an all-day event's midnights as DATEs (read in the calendar's zone, like any
    all-day event), a time as UTC or with the TZID of its IANA zone."""
    if not isinstance(value, dict) or not isinstance(value.get("dateTime"), str):
        raise InvalidCalendarData(f"{name.lower()} has no dateTime")
    try:
        wall = datetime.fromisoformat(value["dateTime"])
    except ValueError as exc:
        raise InvalidCalendarData(f"not a date-time: {value['dateTime']!r}") from exc
    if all_day:
        return f"{name};VALUE=DATE:{wall.date():%Y%m%d}"
    zone_name = str(value.get("timeZone") or "UTC")
    if wall.tzinfo is not None or zone_name.upper() in {"UTC", "ETC/UTC"}:
        moment = wall if wall.tzinfo is not None else wall.replace(tzinfo=UTC)
        return f"{name}:{moment.astimezone(UTC):{_ICS_DATETIME}}Z"
    zone = _zone(zone_name)
    if zone is None:
        # A Windows zone name (only with Prefer: outlook.timezone, which we do not send): the wall time
        # cannot be placed, and guessing would block the wrong hours.
        raise InvalidCalendarData(f"unknown time zone {zone_name[:64]!r}")
    return f"{name};TZID={zone.key}:{wall:{_ICS_DATETIME}}"


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
