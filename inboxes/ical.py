"""iCalendar (RFC 5545) in agents' mail, pure: reading the invite in a message's calendar parts, and
writing the .ics of an outgoing invite. No database here: linking an invite to holds and bookings is
inboxes.invites. A stranger's broken calendar data is described (`CalendarInvite.problem`), never raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from typing import Any

import icalendar

from agentcal.clock import isoformat_z
from agentcal.text import storable_text

PRODID = "-//AgentCal//Inbox invites//EN"
# An invite is a few kilobytes; anything this big is not one we read.
MAX_ICS_BYTES = 256 * 1024
MAX_ATTENDEES = 100
MAX_SUMMARY_CHARS = 500
MAX_ADDRESS_CHARS = 320
# RFC 5545's PARTSTAT for an attendee whose line names none (one of inboxes.models.PartStat, which this
# module does not import: it knows no models).
DEFAULT_PARTSTAT = "needs-action"


# --- Reading ---------------------------------------------------------------------------------------------


class InvalidInvite(ValueError):
    pass


@dataclass(frozen=True)
class CalendarInvite:
    """The first event of a message's calendar data. With `problem` set nothing else is reliable."""

    method: str | None = None
    uid: str | None = None
    sequence: int | None = None
    start: datetime | None = None
    end: datetime | None = None
    summary: str = ""
    organizer: dict[str, str] | None = None
    # [{"email": ..., "name": ..., "status": PARTSTAT lowercased}]
    attendees: list[dict[str, str]] = field(default_factory=list)
    problem: str = ""


def is_calendar_part(content_type: str, filename: str) -> bool:
    return content_type in ("text/calendar", "application/ics") or filename.lower().endswith(".ics")


def invite_read(parts: list[bytes]) -> CalendarInvite | None:
    """The invite in a message's calendar parts: the first that reads as one (Gmail and Outlook send the
    same event twice, inline and attached); None without calendar parts."""
    problem = ""
    for data in parts:
        try:
            return _read_one(data)
        except Exception as exc:  # the data is a stranger's: any failure to read it is "malformed"
            problem = problem or _describe(exc)
    return CalendarInvite(problem=problem) if parts else None


def _describe(exc: Exception) -> str:
    detail = str(exc) if isinstance(exc, InvalidInvite) else f"{type(exc).__name__}: {exc}"
    return storable_text(detail, 300)


def _read_one(data: bytes) -> CalendarInvite:
    if len(data) > MAX_ICS_BYTES:
        raise InvalidInvite(f"calendar data over {MAX_ICS_BYTES} bytes")
    calendar = icalendar.Calendar.from_ical(data)
    if not isinstance(calendar, icalendar.Calendar):
        raise InvalidInvite("not a VCALENDAR")
    events = calendar.events
    if not events:
        raise InvalidInvite("no VEVENT")
    event = events[0]
    broken = [name for name, _ in event.errors if name in ("DTSTART", "DTEND", "DURATION", "SEQUENCE")]
    if broken:
        raise InvalidInvite(f"unreadable {', '.join(broken)}")
    uid = _text(event.get("UID"), 255)
    if not uid:
        raise InvalidInvite("the VEVENT has no UID")
    if "DTSTART" not in event:
        raise InvalidInvite("the VEVENT has no DTSTART")
    start = _utc(event.start, event["DTSTART"].params.get("TZID"))
    end_property = event.get("DTEND")
    end = _utc(event.end, end_property.params.get("TZID") if end_property is not None else None)
    sequence = int(event.get("SEQUENCE", 0))
    method = _text(calendar.get("METHOD"), 32).upper()
    return CalendarInvite(
        method=method or None,
        uid=uid,
        sequence=max(0, min(sequence, 2**31 - 1)),
        start=start,
        end=end,
        summary=_text(event.get("SUMMARY"), MAX_SUMMARY_CHARS),
        organizer=_person(event.get("ORGANIZER")),
        attendees=[
            {**person, "status": _text(prop.params.get("PARTSTAT"), 32).lower() or DEFAULT_PARTSTAT}
            for prop in _values(event, "ATTENDEE")[:MAX_ATTENDEES]
            if (person := _person(prop)) is not None
        ],
    )


def _utc(value: date | datetime, tzid: str | None) -> datetime:
    """An instant in UTC. Without a zone of its own (an all-day date, a floating time) the invite's
    time is read as UTC: the mail says nothing better."""
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(), tzinfo=UTC)
    elif value.tzinfo is None:
        if tzid:
            # icalendar leaves a time with an unknown TZID naive, which would pass for floating.
            raise InvalidInvite(f"unknown time zone {storable_text(str(tzid), 64)!r}")
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _text(value: Any, max_chars: int) -> str:
    return "" if value is None else storable_text(str(value), max_chars).strip()


def _values(component: icalendar.Component, name: str) -> list[Any]:
    value = component.get(name)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _person(prop: Any) -> dict[str, str] | None:
    """{"email", "name"} of an ORGANIZER or ATTENDEE (a `mailto:` address), None without an address."""
    if prop is None:
        return None
    address = _text(prop, MAX_ADDRESS_CHARS)
    if address.lower().startswith("mailto:"):
        address = address[len("mailto:") :]
    address = address.strip().lower()
    if not address:
        return None
    params = getattr(prop, "params", {})
    return {"email": address, "name": _text(params.get("CN"), MAX_ADDRESS_CHARS)}


def calendar_event(invite: CalendarInvite, *, linked: str | None, flag: str | None) -> dict[str, Any]:
    """What a message's `calendar_event` holds (the API's CalendarEventOutput)."""
    return {
        "method": invite.method,
        "uid": invite.uid,
        "sequence": invite.sequence,
        "start_time": isoformat_z(invite.start) if invite.start else None,
        "end_time": isoformat_z(invite.end) if invite.end else None,
        "summary": invite.summary,
        "organizer": invite.organizer,
        "attendees": invite.attendees,
        "linked": linked,
        "flag": str(flag) if flag else None,
        "problem": invite.problem or None,
    }


# --- Writing ---------------------------------------------------------------------------------------------


def invite_ics(event: dict[str, Any], *, stamp: datetime) -> str:
    """The .ics for an outgoing message's `calendar_event` (METHOD REQUEST or CANCEL), CRLF line endings."""
    method = event["method"]
    vevent = icalendar.Event()
    vevent.add("UID", event["uid"])
    vevent.add("SEQUENCE", event["sequence"])
    vevent.add("DTSTAMP", stamp.astimezone(UTC))
    vevent.add("DTSTART", datetime.fromisoformat(event["start_time"]).astimezone(UTC))
    vevent.add("DTEND", datetime.fromisoformat(event["end_time"]).astimezone(UTC))
    vevent.add("SUMMARY", event["summary"])
    vevent.add("STATUS", "CANCELLED" if method == "CANCEL" else "CONFIRMED")
    vevent.add("TRANSP", "OPAQUE")
    organizer = event["organizer"]
    vevent.add("ORGANIZER", _address(organizer, {}))
    for attendee in event["attendees"]:
        params = {"ROLE": "REQ-PARTICIPANT", "PARTSTAT": "NEEDS-ACTION"}
        if method == "REQUEST":
            params["RSVP"] = "TRUE"  # asks the attendee's client for a REPLY, which links back by UID
        vevent.add("ATTENDEE", _address(attendee, params))
    calendar = icalendar.Calendar()
    calendar.add("PRODID", PRODID)
    calendar.add("VERSION", "2.0")
    calendar.add("METHOD", method)
    calendar.add_component(vevent)
    return bytes(calendar.to_ical()).decode()


def _address(person: dict[str, str], params: dict[str, str]) -> icalendar.vCalAddress:
    address = icalendar.vCalAddress(f"mailto:{person['email']}")
    if person.get("name"):
        address.params["CN"] = person["name"]
    for name, value in params.items():
        address.params[name] = value
    return address
