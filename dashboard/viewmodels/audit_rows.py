"""The audit trail as people read it: each row as a sentence (dashboard.wording), the filter's events in
named groups, and one record's facts as a list of labelled values (ids to copy, times in words)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from django.utils.dateparse import parse_datetime

from agentcal.ids import is_public_id
from agentcal.moments import moment_text
from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.models import Calendar, Reservation
from bookings.selectors import primaries_by_id
from dashboard.links import approval_url, reservation_url
from dashboard.timeline import calendar_zone
from dashboard.wording import EVENT_GROUPS, AuditParts, audit_sentence, event_name, failure_words, local_range
from workspaces.models import Workspace


@dataclass
class AuditRow:
    record: AuditRecord
    sentence: str
    event_name: str
    link: str  # the calendar's day with the hold's or booking's drawer open, when it still exists
    approval_link: str = ""  # the approval the row is about (asked, decided, cancelled, expired)


@dataclass
class EventOption:
    value: str
    label: str


@dataclass
class EventGroup:
    label: str
    options: list[EventOption] = field(default_factory=list)


def event_groups() -> list[EventGroup]:
    """The filter's choices: per family, "All … events" (where one code prefix covers it) then each event."""
    groups = []
    for label, family, events in EVENT_GROUPS:
        group = EventGroup(label)
        if family:
            group.options.append(EventOption(family, event_name(family)))
        group.options += [EventOption(str(event), event_name(event)) for event in events]
        groups.append(group)
    return groups


def known_filter_values() -> set[str]:
    return {option.value for group in event_groups() for option in group.options}


def workspace_calendars(workspace: Workspace) -> dict[str, Calendar]:
    """Every calendar of the workspace by public id: rows name them and show times in their zones."""
    return {c.public_id: c for c in Calendar.objects.filter(workspace=workspace)}


def actor_words(record: AuditRecord, agents: dict[str, str]) -> str:
    """Who acted: the signed-in person, else the agent, else the key a refused request came with."""
    if record.actor_user:
        return record.actor_user
    if record.agent_public_id:
        return f"Agent {agents.get(record.agent_public_id, record.agent_public_id)}"
    if record.auth_key_prefix:
        return f"A request with key {record.auth_key_prefix}…"
    return "AgentCal"


def _extra(record: AuditRecord, details: dict[str, Any]) -> str:
    """An event's own detail worth a place in its sentence."""
    event = record.event_type
    if event in (AuditEvent.API_KEY_CREATED, AuditEvent.API_KEY_REVOKED, AuditEvent.API_KEY_ROTATED):
        prefix = details.get("key_prefix")
        return f" (key {prefix}…)" if isinstance(prefix, str) else ""
    if event.startswith("team."):
        email = details.get("email") or details.get("member") or details.get("user")
        return str(email) if email else "a teammate"
    if event in (AuditEvent.INBOX_MESSAGE_RECEIVED, AuditEvent.INBOX_MESSAGE_REFUSED):
        sender = details.get("sender") or details.get("from")
        return f" from {sender}" if isinstance(sender, str) and sender else ""
    if event == AuditEvent.CONNECTION_FAILED:
        error = details.get("error")
        return f": {error}" if isinstance(error, str) and error else ""
    if event.startswith("approval."):
        summary = details.get("summary")
        return f": {summary}" if isinstance(summary, str) and summary else ""
    return ""


def audit_rows(
    workspace: Workspace, records: list[AuditRecord], agents: dict[str, str], calendars: dict[str, Calendar]
) -> list[AuditRow]:
    """The page's rows in words. One query for every hold and booking they mention."""
    mentioned = {r.reservation_public_id for r in records if r.reservation_public_id}
    reservations = primaries_by_id(workspace, mentioned) if mentioned else {}
    rows = []
    for record in records:
        details = record.details if isinstance(record.details, dict) else {}
        reservation: Reservation | None = reservations.get(record.reservation_public_id)
        calendar = calendars.get(record.calendar_public_id) or (reservation.calendar if reservation else None)
        zone: ZoneInfo | None = calendar_zone(calendar) if calendar else None
        start, end = record.requested_start, record.requested_end
        if reservation and not (start and end):
            start, end = reservation.start_time, reservation.end_time
        agent_id = details.get("agent_id")
        parts = AuditParts(
            actor=actor_words(record, agents),
            event_type=record.event_type,
            outcome=record.outcome,
            calendar=calendar.name if calendar else "",
            title=reservation.title if reservation else "",
            is_hold=record.reservation_public_id.startswith("hld_")
            and not record.event_type.startswith("calendar.commit"),
            start=start,
            end=end,
            zone=zone,
            reason=record.failure_reason,
            http_status=record.http_status,
            agent=agents.get(agent_id, agent_id) if isinstance(agent_id, str) else "",
            key=record.auth_key_prefix,
            extra=_extra(record, details),
        )
        rows.append(
            AuditRow(
                record=record,
                sentence=audit_sentence(parts),
                event_name=event_name(record.event_type),
                link=reservation_url(workspace, reservation) if reservation else "",
                approval_link=_approval_link(workspace, details.get("approval_id")),
            )
        )
    return rows


def _approval_link(workspace: Workspace, approval_id: object) -> str:
    if not (isinstance(approval_id, str) and approval_id.startswith("appr_") and is_public_id(approval_id)):
        return ""
    return approval_url(workspace, approval_id)


# --- One record's facts ---------------------------------------------------------------------------------

# The API representation's fields, as labels; fields not here (and details' keys) read as their words.
FIELD_LABELS = {
    "id": "Record id",
    "timestamp": "When",
    "event_type": "Event",
    "outcome": "Outcome",
    "workspace_id": "Workspace id",
    "agent_id": "Agent",
    "actor_user": "Person",
    "auth_key_prefix": "Key",
    "calendar": "Calendar",
    "reservation": "Hold or booking",
    "requested_range": "Requested time",
    "http_status": "HTTP status",
    "failure_reason": "Why refused",
    "conflict_details": "Conflict",
    "fencing_token": "Fencing token",
    "request_id": "Request id",
}


# The prefixes of the ids this server hands out (agentcal.ids): a value that looks like one is an id to
# copy; "slot_conflict" is not.
ID_PREFIXES = frozenset(
    [
        "agt",
        "appr",
        "att",
        "aud",
        "bk",
        "cal",
        "con",
        "dlv",
        "evt",
        "hld",
        "inm",
        "msg",
        "req",
        "thr",
        "whe",
        "ws",
    ]
)


def looks_like_id(value: str) -> bool:
    return is_public_id(value) and value.split("_", 1)[0] in ID_PREFIXES


@dataclass
class Fact:
    label: str
    text: str
    kind: str = "text"  # text | id | time | json | group
    note: str = ""  # what an id names (an agent's or calendar's name)
    parts: list[Fact] = field(default_factory=list)  # a group's own facts (an object's keys)


def _label(key: str) -> str:
    words = FIELD_LABELS.get(key) or key.replace("_", " ")
    return words[:1].upper() + words[1:]


def _span_words(value: Any) -> str:
    """ "Fri 4 Dec 2026, 13:30–14:00 UTC" for a {"start_time", "end_time"} object; "" for anything else."""
    if not (isinstance(value, dict) and {"start_time", "end_time"} <= value.keys()):
        return ""
    start, end = parse_datetime(str(value["start_time"])), parse_datetime(str(value["end_time"]))
    if not (start and end):
        return ""
    return f"{local_range(start, end, UTC)} UTC"


def _fact(
    key: str, value: Any, names: dict[str, str], zone: tzinfo | None, *, nested: bool = False
) -> Fact | None:
    if value in (None, "", [], {}):
        return None
    label = _label(key)
    if isinstance(value, str):
        if key == "outcome":
            return Fact(label, value.capitalize())
        if key == "failure_reason":
            return Fact(label, f"{failure_words(value)} ({value})")
        if looks_like_id(value):
            return Fact(label, value, "id", names.get(value, ""))
        moment = parse_datetime(value) if "T" in value and value[:4].isdigit() else None
        if isinstance(moment, datetime):
            return Fact(label, moment_text(moment, zone, "seconds"), "time")
        return Fact(label, value)
    if span := _span_words(value):
        return Fact(label, span, "time")
    if isinstance(value, bool):
        return Fact(label, "yes" if value else "no")
    if isinstance(value, int | float):
        return Fact(label, str(value))
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return Fact(label, ", ".join(str(item) for item in value))
    if isinstance(value, list) and all(_span_words(item) for item in value):
        return Fact(label, "; ".join(_span_words(item) for item in value), "time")
    if isinstance(value, dict) and not nested:
        # An object one level down (a conflict's details) reads as its own labelled values.
        parts = [fact for k, v in value.items() if (fact := _fact(k, v, names, zone, nested=True))]
        return Fact(label, "", "group", parts=parts)
    return Fact(label, json.dumps(value, ensure_ascii=False, sort_keys=True), "json")


def record_facts(full: dict[str, Any], names: dict[str, str], zone: tzinfo | None) -> list[Fact]:
    """The record (its API representation) as labelled values: its fields, then each key of its details.
    `names`: agent and calendar names by public id, shown beside their ids; moments read in `zone`, the
    viewer's (UTC when not known yet)."""
    facts = []
    for key, value in full.items():
        if key in ("details", "event_type"):
            continue
        fact = _fact(key, value, names, zone)
        if fact:
            facts.append(fact)
    details = full.get("details")
    if isinstance(details, dict):
        for key, value in details.items():
            fact = _fact(key, value, names, zone)
            if fact:
                facts.append(fact)
    return facts
