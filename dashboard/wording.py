"""How values read to people on every page: provider names, lengths of time, time ranges. Pure functions
(no database, no request), shared by the view-models and the timeline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from agentcal.moments import zone_label
from audit.events import AuditEvent
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


def local_range(start: datetime, end: datetime, zone: tzinfo, *, year: bool = True) -> str:
    """ "Tue 3 Dec 2024, 14:00–14:30" ("Tue 3 Dec 14:00–14:30" without the year), or with both dates when
    it crosses midnight."""
    local_start, local_end = start.astimezone(zone), end.astimezone(zone)

    def when(moment: datetime) -> str:
        return (
            f"{moment:%a} {moment.day} {moment:%b %Y, %H:%M}"
            if year
            else f"{moment:%a} {moment.day} {moment:%b %H:%M}"
        )

    if local_end.date() == local_start.date():
        return f"{when(local_start)}–{local_end:%H:%M}"
    return f"{when(local_start)} – {when(local_end)}"


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


# --- The audit trail in words ---------------------------------------------------------------------------
# One home for how each audited event reads to people: its name (the filter's options, a row's label) and
# the sentence a row of the trail reads as. Sentence templates are str.format() strings over the parts
# AuditParts gives: {actor}, {subject} (the booking's or hold's title in italics, or "a booking"), {span},
# {on_calendar} (" on Berlin office" or nothing), {reason} (": slot taken (409)" or nothing), {agent} (the
# agent an admin action concerned) and {extra} (an event's own detail, e.g. a key's prefix).

# (family label, the family's own filter value or "", its events) in the order the filter lists them.
EVENT_GROUPS: list[tuple[str, str, list[AuditEvent]]] = [
    (
        "Holds",
        "calendar.hold.*",
        [
            AuditEvent.HOLD_CREATED,
            AuditEvent.HOLD_REJECTED,
            AuditEvent.HOLD_EXTENDED,
            AuditEvent.HOLD_EXTEND_REJECTED,
            AuditEvent.HOLD_RELEASED,
            AuditEvent.HOLD_RELEASE_REJECTED,
            AuditEvent.HOLD_EXPIRED,
            AuditEvent.HOLD_EVICTED,
        ],
    ),
    (
        "Bookings",
        "calendar.booking.*",
        [
            AuditEvent.COMMIT_CREATED,
            AuditEvent.COMMIT_REJECTED,
            AuditEvent.BOOKING_MOVED,
            AuditEvent.BOOKING_MOVE_REJECTED,
            AuditEvent.BOOKING_CANCELLED,
            AuditEvent.BOOKING_CANCEL_REJECTED,
            AuditEvent.BOOKING_BUMPED,
            AuditEvent.BOOKING_UPSTREAM_CONFLICT,
            AuditEvent.BOOKING_UPSTREAM_CONFLICT_RESOLVED,
            AuditEvent.BOOKING_ATTENDEE_RESPONDED,
            AuditEvent.BOOKING_ATTENDEE_RESPONSE_REJECTED,
            AuditEvent.BOOKING_REJECTED,
            AuditEvent.BOOKINGS_REJECTED,
        ],
    ),
    (
        "Calendars",
        "",
        [
            AuditEvent.CALENDAR_CREATED,
            AuditEvent.CALENDAR_UPDATED,
            AuditEvent.CALENDAR_REJECTED,
            AuditEvent.AVAILABILITY_REJECTED,
        ],
    ),
    (
        "Approvals",
        "approval.*",
        [
            AuditEvent.APPROVAL_REQUESTED,
            AuditEvent.APPROVAL_REJECTED,
            AuditEvent.APPROVAL_APPROVED,
            AuditEvent.APPROVAL_DENIED,
            AuditEvent.APPROVAL_DECIDE_REJECTED,
            AuditEvent.APPROVAL_SETTLED,
            AuditEvent.APPROVAL_EXPIRED,
            AuditEvent.APPROVAL_CANCELLED,
            AuditEvent.APPROVAL_CANCEL_REJECTED,
        ],
    ),
    (
        "Inbox",
        "inbox.*",
        [
            AuditEvent.INBOX_MESSAGE_RECEIVED,
            AuditEvent.INBOX_MESSAGE_REFUSED,
            AuditEvent.INBOX_WEBHOOK_REJECTED,
            AuditEvent.INBOX_MESSAGE_QUEUED,
            AuditEvent.INBOX_MESSAGE_REJECTED,
            AuditEvent.INBOX_MESSAGE_AWAITING_APPROVAL,
            AuditEvent.INBOX_MESSAGE_DISCARDED,
            AuditEvent.INBOX_MESSAGE_SENT,
            AuditEvent.INBOX_MESSAGE_FAILED,
            AuditEvent.INBOX_INVITE_CANCELLED_BY_ORGANIZER,
            AuditEvent.INBOX_INVITE_CANCELLED,
            AuditEvent.INBOX_INVITE_UPDATED,
            AuditEvent.INBOX_REJECTED,
        ],
    ),
    (
        "Webhooks",
        "webhook.*",
        [
            AuditEvent.WEBHOOK_ENDPOINT_CREATED,
            AuditEvent.WEBHOOK_ENDPOINT_DISABLED,
            AuditEvent.WEBHOOK_DELIVERY_REPLAYED,
            AuditEvent.WEBHOOK_ENDPOINT_REJECTED,
            AuditEvent.WEBHOOK_DELIVERY_REJECTED,
            AuditEvent.WEBHOOK_DELIVERY_REPLAY_REJECTED,
            AuditEvent.WEBHOOK_EVENTS_REJECTED,
        ],
    ),
    (
        "Upstream sync",
        "sync.*",
        [
            AuditEvent.CONNECTION_CREATED,
            AuditEvent.CONNECTION_REJECTED,
            AuditEvent.CONNECTION_DELETED,
            AuditEvent.CONNECTION_FAILED,
            AuditEvent.CONNECTION_RECOVERED,
            AuditEvent.PUSH_REJECTED,
        ],
    ),
    (
        "Keys and agents",
        "",
        [
            AuditEvent.AGENT_CREATED,
            AuditEvent.AGENT_UPDATED,
            AuditEvent.AGENT_DISABLED,
            AuditEvent.AGENT_ENABLED,
            AuditEvent.API_KEY_CREATED,
            AuditEvent.API_KEY_ROTATED,
            AuditEvent.API_KEY_REVOKED,
        ],
    ),
    (
        "Emergency stop",
        "",
        [
            AuditEvent.AGENT_PAUSED,
            AuditEvent.AGENT_RESUMED,
            AuditEvent.WORKSPACE_PAUSED,
            AuditEvent.WORKSPACE_RESUMED,
        ],
    ),
    ("Limits", "", [AuditEvent.AGENT_LIMITS_UPDATED, AuditEvent.WORKSPACE_LIMITS_UPDATED]),
    (
        "Team",
        "team.*",
        [
            AuditEvent.TEAM_INVITATION_CREATED,
            AuditEvent.TEAM_INVITATION_RESENT,
            AuditEvent.TEAM_INVITATION_REVOKED,
            AuditEvent.TEAM_INVITATION_ACCEPTED,
            AuditEvent.TEAM_MEMBER_ROLE_CHANGED,
            AuditEvent.TEAM_MEMBER_ROLE_CHANGE_REJECTED,
            AuditEvent.TEAM_MEMBER_REMOVED,
            AuditEvent.TEAM_MEMBER_REMOVE_REJECTED,
        ],
    ),
    (
        "Mail settings",
        "",
        [
            AuditEvent.WORKSPACE_INBOUND_DOMAIN_REQUESTED,
            AuditEvent.WORKSPACE_INBOUND_DOMAIN_VERIFIED,
            AuditEvent.WORKSPACE_INBOUND_DOMAIN_VERIFY_REJECTED,
            AuditEvent.WORKSPACE_INBOUND_DOMAIN_UPDATED,
            AuditEvent.WORKSPACE_INBOUND_SECRET_CREATED,
            AuditEvent.WORKSPACE_INBOUND_SECRET_ROTATED,
        ],
    ),
    (
        "Refused requests",
        "",
        [AuditEvent.AUTH_REJECTED, AuditEvent.REQUEST_REJECTED, AuditEvent.AUDIT_READ_REJECTED],
    ),
]

# The families the filter offers whole (the API's `prefix.*` filter).
FAMILY_NAMES: dict[str, str] = {
    "calendar.hold.*": "Every hold event",
    "calendar.booking.*": "Every change to a booking",
    "approval.*": "Every approval event",
    "inbox.*": "Every inbox event",
    "webhook.*": "Every webhook event",
    "sync.*": "Every sync event",
    "team.*": "Every team change",
    "calendar.*": "Every calendar event",
    "agent.*": "Every agent event",
    "workspace.*": "Every workspace event",
}

# How each event is named where people pick or scan events: the filter's options, a row's label.
EVENT_NAMES: dict[str, str] = {
    AuditEvent.AUTH_REJECTED: "Request with a bad key refused",
    AuditEvent.REQUEST_REJECTED: "Request refused",
    AuditEvent.AUDIT_READ_REJECTED: "Audit trail read refused",
    AuditEvent.AVAILABILITY_REJECTED: "Availability request refused",
    AuditEvent.BOOKING_REJECTED: "Booking request refused",
    AuditEvent.BOOKINGS_REJECTED: "Booking list refused",
    AuditEvent.INBOX_REJECTED: "Inbox request refused",
    AuditEvent.WEBHOOK_ENDPOINT_REJECTED: "Webhook change refused",
    AuditEvent.WEBHOOK_DELIVERY_REJECTED: "Webhook delivery request refused",
    AuditEvent.WEBHOOK_DELIVERY_REPLAY_REJECTED: "Webhook replay refused",
    AuditEvent.WEBHOOK_EVENTS_REJECTED: "Event list refused",
    AuditEvent.CALENDAR_CREATED: "Calendar created",
    AuditEvent.CALENDAR_UPDATED: "Calendar settings changed",
    AuditEvent.CALENDAR_REJECTED: "Calendar change refused",
    AuditEvent.HOLD_CREATED: "Hold placed",
    AuditEvent.HOLD_REJECTED: "Hold refused",
    AuditEvent.HOLD_EXTENDED: "Hold extended",
    AuditEvent.HOLD_EXTEND_REJECTED: "Hold extension refused",
    AuditEvent.HOLD_RELEASED: "Hold released",
    AuditEvent.HOLD_RELEASE_REJECTED: "Hold release refused",
    AuditEvent.HOLD_EXPIRED: "Hold expired",
    AuditEvent.HOLD_EVICTED: "Hold taken over",
    AuditEvent.COMMIT_CREATED: "Booked",
    AuditEvent.COMMIT_REJECTED: "Booking refused",
    AuditEvent.BOOKING_BUMPED: "Booking bumped",
    AuditEvent.BOOKING_CANCELLED: "Booking cancelled",
    AuditEvent.BOOKING_CANCEL_REJECTED: "Cancellation refused",
    AuditEvent.BOOKING_MOVED: "Booking moved",
    AuditEvent.BOOKING_MOVE_REJECTED: "Move refused",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT: "Overlap with the owner's own calendar",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT_RESOLVED: "Overlap with the owner's calendar cleared",
    AuditEvent.BOOKING_ATTENDEE_RESPONDED: "Attendee answered",
    AuditEvent.BOOKING_ATTENDEE_RESPONSE_REJECTED: "Attendee answer not applied",
    AuditEvent.CONNECTION_CREATED: "Calendar connected",
    AuditEvent.CONNECTION_REJECTED: "Connection refused",
    AuditEvent.CONNECTION_DELETED: "Calendar disconnected",
    AuditEvent.CONNECTION_FAILED: "Sync failing",
    AuditEvent.CONNECTION_RECOVERED: "Sync working again",
    AuditEvent.PUSH_REJECTED: "Change notification refused",
    AuditEvent.INBOX_MESSAGE_RECEIVED: "Mail received",
    AuditEvent.INBOX_MESSAGE_REFUSED: "Mail refused",
    AuditEvent.INBOX_WEBHOOK_REJECTED: "Inbound mail webhook refused",
    AuditEvent.INBOX_MESSAGE_QUEUED: "Mail queued to send",
    AuditEvent.INBOX_MESSAGE_REJECTED: "Mail send refused",
    AuditEvent.INBOX_MESSAGE_AWAITING_APPROVAL: "Mail waiting for review",
    AuditEvent.INBOX_MESSAGE_DISCARDED: "Mail draft discarded",
    AuditEvent.INBOX_MESSAGE_SENT: "Mail sent",
    AuditEvent.INBOX_MESSAGE_FAILED: "Mail could not be sent",
    AuditEvent.INBOX_INVITE_CANCELLED_BY_ORGANIZER: "Invite cancelled by its organizer",
    AuditEvent.INBOX_INVITE_CANCELLED: "Cancellation sent to attendees",
    AuditEvent.INBOX_INVITE_UPDATED: "Updated invite sent to attendees",
    AuditEvent.WEBHOOK_ENDPOINT_CREATED: "Webhook added",
    AuditEvent.WEBHOOK_ENDPOINT_DISABLED: "Webhook turned off",
    AuditEvent.WEBHOOK_DELIVERY_REPLAYED: "Webhook delivery sent again",
    AuditEvent.APPROVAL_REQUESTED: "Approval asked for",
    AuditEvent.APPROVAL_REJECTED: "Approval request refused",
    AuditEvent.APPROVAL_APPROVED: "Approved",
    AuditEvent.APPROVAL_DENIED: "Denied",
    AuditEvent.APPROVAL_DECIDE_REJECTED: "Decision refused",
    AuditEvent.APPROVAL_SETTLED: "Approved request carried out",
    AuditEvent.APPROVAL_EXPIRED: "Approval expired",
    AuditEvent.APPROVAL_CANCELLED: "Approval withdrawn",
    AuditEvent.APPROVAL_CANCEL_REJECTED: "Withdrawal refused",
    AuditEvent.AGENT_CREATED: "Agent added",
    AuditEvent.AGENT_UPDATED: "Agent changed",
    AuditEvent.AGENT_DISABLED: "Agent disabled",
    AuditEvent.AGENT_ENABLED: "Agent enabled",
    AuditEvent.AGENT_PAUSED: "Agent paused",
    AuditEvent.AGENT_RESUMED: "Agent resumed",
    AuditEvent.WORKSPACE_PAUSED: "Workspace paused",
    AuditEvent.WORKSPACE_RESUMED: "Workspace resumed",
    AuditEvent.AGENT_LIMITS_UPDATED: "Agent's limits changed",
    AuditEvent.WORKSPACE_LIMITS_UPDATED: "Default limits changed",
    AuditEvent.API_KEY_CREATED: "API key created",
    AuditEvent.API_KEY_REVOKED: "API key revoked",
    AuditEvent.API_KEY_ROTATED: "API key rotated",
    AuditEvent.WORKSPACE_INBOUND_DOMAIN_UPDATED: "Mail domain changed",
    AuditEvent.WORKSPACE_INBOUND_DOMAIN_REQUESTED: "Own mail domain asked for",
    AuditEvent.WORKSPACE_INBOUND_DOMAIN_VERIFIED: "Own mail domain verified",
    AuditEvent.WORKSPACE_INBOUND_DOMAIN_VERIFY_REJECTED: "Mail domain check failed",
    AuditEvent.WORKSPACE_INBOUND_SECRET_CREATED: "Inbound mail secret created",
    AuditEvent.WORKSPACE_INBOUND_SECRET_ROTATED: "Inbound mail secret rotated",
    AuditEvent.TEAM_INVITATION_CREATED: "Teammate invited",
    AuditEvent.TEAM_INVITATION_RESENT: "Invitation sent again",
    AuditEvent.TEAM_INVITATION_REVOKED: "Invitation withdrawn",
    AuditEvent.TEAM_INVITATION_ACCEPTED: "Invitation accepted",
    AuditEvent.TEAM_MEMBER_ROLE_CHANGED: "Role changed",
    AuditEvent.TEAM_MEMBER_ROLE_CHANGE_REJECTED: "Role change refused",
    AuditEvent.TEAM_MEMBER_REMOVED: "Member removed",
    AuditEvent.TEAM_MEMBER_REMOVE_REJECTED: "Removal refused",
}

# What each event reads as, as a sentence. Events not here read "<actor> — <event name>".
EVENT_SENTENCES: dict[str, str] = {
    AuditEvent.AUTH_REJECTED: "A request with {key} was refused{reason}",
    AuditEvent.REQUEST_REJECTED: "{actor} was refused a request{reason}",
    AuditEvent.CALENDAR_CREATED: "{actor} created the calendar {calendar}",
    AuditEvent.CALENDAR_UPDATED: "{actor} changed the settings of {calendar}",
    AuditEvent.CALENDAR_REJECTED: "{actor} was refused a calendar change{reason}",
    AuditEvent.HOLD_CREATED: "{actor} held {span}{on_calendar}",
    AuditEvent.HOLD_REJECTED: "{actor} was refused a hold{span_for}{on_calendar}{reason}",
    AuditEvent.HOLD_EXTENDED: "{actor} extended the hold on {subject}{on_calendar}",
    AuditEvent.HOLD_EXTEND_REJECTED: "{actor} was refused an extension of {subject}{reason}",
    AuditEvent.HOLD_RELEASED: "{actor} released the hold on {subject}{on_calendar}",
    AuditEvent.HOLD_RELEASE_REJECTED: "{actor} was refused the release of {subject}{reason}",
    AuditEvent.HOLD_EXPIRED: "The hold on {subject}{on_calendar} ran out",
    AuditEvent.HOLD_EVICTED: "The hold on {subject}{on_calendar} was taken over by a higher priority",
    AuditEvent.COMMIT_CREATED: "{actor} booked {subject}{on_calendar}{span_at}",
    AuditEvent.COMMIT_REJECTED: "{actor} was refused a booking of {subject}{reason}",
    AuditEvent.BOOKING_BUMPED: "{subject}{on_calendar} was bumped by a higher priority",
    AuditEvent.BOOKING_CANCELLED: "{actor} cancelled {subject}{on_calendar}",
    AuditEvent.BOOKING_CANCEL_REJECTED: "{actor} was refused the cancellation of {subject}{reason}",
    AuditEvent.BOOKING_MOVED: "{actor} moved {subject}{on_calendar}{span_to}",
    AuditEvent.BOOKING_MOVE_REJECTED: "{actor} was refused a move of {subject}{reason}",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT: "The owner's own calendar now overlaps {subject}{on_calendar}",
    AuditEvent.BOOKING_UPSTREAM_CONFLICT_RESOLVED: "The overlap with {subject}{on_calendar} cleared",
    AuditEvent.BOOKING_ATTENDEE_RESPONDED: "An attendee answered the invite to {subject}",
    AuditEvent.BOOKING_ATTENDEE_RESPONSE_REJECTED: "An answer to {subject} was not applied{reason}",
    AuditEvent.CONNECTION_CREATED: "{actor} connected an upstream calendar to {calendar}",
    AuditEvent.CONNECTION_REJECTED: "{actor} was refused a calendar connection{reason}",
    AuditEvent.CONNECTION_DELETED: "{actor} disconnected an upstream calendar from {calendar}",
    AuditEvent.CONNECTION_FAILED: "Syncing {calendar} with its upstream calendar failed{extra}",
    AuditEvent.CONNECTION_RECOVERED: "Syncing {calendar} with its upstream calendar works again",
    AuditEvent.PUSH_REJECTED: "A change notification for {calendar} was refused{reason}",
    AuditEvent.INBOX_MESSAGE_RECEIVED: "{actor}'s inbox received mail{extra}",
    AuditEvent.INBOX_MESSAGE_REFUSED: "Mail was refused{extra}{reason}",
    AuditEvent.INBOX_MESSAGE_QUEUED: "{actor} queued mail to send{extra}",
    AuditEvent.INBOX_MESSAGE_REJECTED: "{actor} was refused sending mail{reason}",
    AuditEvent.INBOX_MESSAGE_AWAITING_APPROVAL: "{actor}'s mail waits for a person's review",
    AuditEvent.INBOX_MESSAGE_DISCARDED: "{actor}'s mail draft was not sent",
    AuditEvent.INBOX_MESSAGE_SENT: "{actor}'s mail was sent{extra}",
    AuditEvent.INBOX_MESSAGE_FAILED: "{actor}'s mail could not be sent{reason}",
    AuditEvent.APPROVAL_REQUESTED: "{actor} asked for approval{extra}",
    AuditEvent.APPROVAL_REJECTED: "{actor} was refused an approval request{reason}",
    AuditEvent.APPROVAL_APPROVED: "{actor} approved a request{extra}",
    AuditEvent.APPROVAL_DENIED: "{actor} denied a request{extra}",
    AuditEvent.APPROVAL_DECIDE_REJECTED: "{actor} was refused a decision{reason}",
    AuditEvent.APPROVAL_EXPIRED: "An approval request expired before anyone decided",
    AuditEvent.APPROVAL_CANCELLED: "{actor} withdrew its approval request",
    AuditEvent.AGENT_CREATED: "{actor} added the agent {agent}",
    AuditEvent.AGENT_UPDATED: "{actor} changed the agent {agent}",
    AuditEvent.AGENT_DISABLED: "{actor} disabled the agent {agent}",
    AuditEvent.AGENT_ENABLED: "{actor} enabled the agent {agent}",
    AuditEvent.AGENT_PAUSED: "{actor} paused the agent {agent}",
    AuditEvent.AGENT_RESUMED: "{actor} resumed the agent {agent}",
    AuditEvent.WORKSPACE_PAUSED: "{actor} paused every agent of the workspace",
    AuditEvent.WORKSPACE_RESUMED: "{actor} resumed the workspace's agents",
    AuditEvent.AGENT_LIMITS_UPDATED: "{actor} changed the limits of {agent}",
    AuditEvent.WORKSPACE_LIMITS_UPDATED: "{actor} changed the workspace's default limits",
    AuditEvent.API_KEY_CREATED: "{actor} created an API key for {agent}{extra}",
    AuditEvent.API_KEY_REVOKED: "{actor} revoked an API key of {agent}{extra}",
    AuditEvent.API_KEY_ROTATED: "{actor} rotated an API key of {agent}{extra}",
    AuditEvent.TEAM_INVITATION_CREATED: "{actor} invited {extra}",
    AuditEvent.TEAM_MEMBER_ROLE_CHANGED: "{actor} changed the role of {extra}",
    AuditEvent.TEAM_MEMBER_REMOVED: "{actor} removed {extra} from the team",
}

# Why a request was refused, in words (the API's error codes); others read as the code in plain words.
FAILURE_REASONS: dict[str, str] = {
    "slot_conflict": "slot taken",
    "no_slot_found": "no free slot found",
    "outside_working_hours": "outside working hours",
    "insufficient_notice": "too short notice",
    "booking_too_long": "booking too long",
    "insufficient_scope": "the key may not do that",
    "unauthenticated": "unknown or missing key",
    "rate_limited": "too many requests",
    "quota_exceeded": "over its quota",
    "agent_paused": "the agent is paused",
    "not_owner": "not its own",
    "hold_expired": "the hold had run out",
    "hold_evicted": "the hold had been taken over",
    "hold_released": "the hold had been released",
    "hold_not_live": "the hold has ended",
    "hold_token_mismatch": "wrong hold token",
    "hold_already_committed": "already booked",
    "hold_awaiting_approval": "waiting for approval",
    "booking_not_live": "the booking has ended",
    "stale_fencing_token": "outdated fencing token",
    "priority_not_allowed": "priority above the agent's maximum",
    "approval_already_decided": "already decided",
    "approval_expired": "the approval had expired",
    "idempotency_key_reused": "idempotency key reused",
    "invalid_request": "invalid request",
    "not_found": "not found",
    "forbidden": "not allowed",
}


def event_name(event_type: str) -> str:
    """A readable name for any event type, mapped or not: "calendar.hold.created" → "Hold placed"; an
    unknown "calendar.thing.done" → "Calendar thing done"; a family "calendar.hold.*" → "All hold events"."""
    if event_type in EVENT_NAMES:
        return EVENT_NAMES[event_type]
    if event_type in FAMILY_NAMES:
        return FAMILY_NAMES[event_type]
    words = event_type.removesuffix(".*").replace(".", " ").replace("_", " ").strip()
    return (words[:1].upper() + words[1:]) or event_type


def failure_words(reason: str) -> str:
    return FAILURE_REASONS.get(reason, reason.replace("_", " "))


@dataclass
class AuditParts:
    """What a row's sentence may mention, resolved to names by the caller (plain text; escaped here)."""

    actor: str
    event_type: str
    outcome: str = "success"
    calendar: str = ""
    title: str = ""  # the hold's or booking's title, when it has one
    is_hold: bool = False
    start: datetime | None = None
    end: datetime | None = None
    zone: ZoneInfo | None = None
    reason: str = ""
    http_status: int | None = None
    agent: str = ""
    key: str = ""
    extra: str = ""


def short_range(start: datetime, end: datetime, zone: ZoneInfo | None) -> str:
    """ "Thu 3 Dec 14:00–14:30 CET" in the calendar's zone (UTC when it is not known)."""
    zone = zone or ZoneInfo("UTC")
    return f"{local_range(start, end, zone, year=False)} {zone_label(end.astimezone(zone))}"


def audit_sentence(parts: AuditParts) -> SafeString:
    """The row as a sentence: "owner@acme.example cancelled <em>Quarterly planning</em> on Berlin office"."""
    span = short_range(parts.start, parts.end, parts.zone) if parts.start and parts.end else ""
    noun = "hold" if parts.is_hold or parts.event_type.startswith("calendar.hold.") else "booking"
    subject = format_html("<em>{}</em>", parts.title) if parts.title else f"a {noun}"
    reason = ""
    if parts.outcome != "success" and (parts.reason or parts.http_status):
        words = failure_words(parts.reason) if parts.reason else "refused"
        reason = f": {words}" + (f" ({parts.http_status})" if parts.http_status else "")
    values: dict[str, Any] = {
        "actor": parts.actor,
        "subject": subject,
        "calendar": parts.calendar or "a calendar",
        "on_calendar": f" on {parts.calendar}" if parts.calendar else "",
        "span": span or "a slot",
        "span_for": f" for {span}" if span else "",
        "span_at": f", {span}" if span else "",
        "span_to": f" to {span}" if span else "",
        "reason": reason,
        "agent": parts.agent or "an agent",
        "key": f"key {parts.key}…" if parts.key else "an unknown key",
        "extra": parts.extra,
    }
    template = EVENT_SENTENCES.get(parts.event_type)
    if template is None:
        return format_html("{} — {}{}", parts.actor, event_name(parts.event_type), reason)
    sentence = format_html(template, **values)
    # A sentence that opens with its subject ("a booking was bumped") starts with a capital; a person's
    # address never gets one.
    if sentence.startswith("a "):
        return mark_safe("A" + sentence[1:])  # format_html escaped every part
    return sentence
