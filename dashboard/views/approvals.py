"""The approval queue and one approval's page: what the agent asks, what approving would do, live state.

A person deciding must see what they are signing off, in words rather than ids:
- an approval that gates a hold shows the booking approving would make (calendar, local time and UTC,
  title, attendees, the agent and its priority) and anything that already stands in its way (the hold
  was taken over or ran out, the owner's own calendar is busy then), linked both ways with the calendar;
- a review-first email draft shows as the email it would send, its HTML sanitized (inboxes.html);
- any other evidence shows as nested lists in the agent's own key order (Approval.evidence_in_order),
  long text folded, the raw JSON one click away.

Everything on these pages stays current without a reload, by htmx polling (no long-lived connections
for the web workers to hold): the queue table, the sidebar's pending count with the tab title, and an
open approval, whose decision card turns into "Approved by X at T" when someone else decides. The poll
sends what it last saw and gets 204 while nothing changed, so a half-typed note is never swapped away.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models.functions import Now
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Membership, Permission
from agentcal.clock import server_now
from agentcal.errors import ApprovalAlreadyDecided, ApprovalExpired
from approvals.models import NOTE_MAX_CHARS, Approval, ApprovalStatus
from approvals.selectors import pending_count
from approvals.services import approval_decide
from bookings.models import BusyBlock, Reservation, ReservationStatus, overlapping_q
from bookings.spans import Span
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from dashboard.views.calendars import calendar_zone, reservation_url
from dashboard.views.connections import provider_name
from dashboard.views.inbox import THREAD_PAGE_POLICY
from inboxes.html import sanitize_html
from inboxes.models import Message
from workspaces.models import Workspace

QUEUE_POLL_SECONDS = 5
DETAIL_POLL_SECONDS = 5
RECENT_DECISIONS = 20

# Evidence display: beyond these, text folds and long lists or deep nesting defer to the raw JSON.
LONG_TEXT_CHARS = 280
LONG_TEXT_LINES = 6
PREVIEW_CHARS = 140
MAX_ITEMS_SHOWN = 100
MAX_DEPTH_SHOWN = 8
MAX_NODES_SHOWN = 2000
RAW_SNIPPET_CHARS = 300
MAX_ATTENDEES_SHOWN = 50

STATUS_LABELS: dict[str, str] = {
    ApprovalStatus.PENDING: "Waiting for a decision",
    ApprovalStatus.APPROVED: "Approved",
    ApprovalStatus.DENIED: "Denied",
    ApprovalStatus.EXPIRED: "Expired",
    ApprovalStatus.CANCELLED: "Withdrawn",
}
STATUS_EXPLAINED: dict[str, str] = {
    ApprovalStatus.PENDING: "Nobody has decided yet.",
    ApprovalStatus.APPROVED: "A person said yes.",
    ApprovalStatus.DENIED: "A person said no.",
    ApprovalStatus.EXPIRED: "Nobody decided in time; the agent was told it expired (not that it was denied).",
    ApprovalStatus.CANCELLED: "The agent withdrew its request before anyone decided.",
}
# Why an approved hold did not become a booking (Approval.booking_error), in words.
BOOKING_ERRORS = {
    "hold_evicted": "the time slot had been taken over before the decision (by a higher-priority agent "
    "or an event in the owner's own calendar)",
    "hold_expired": "the hold had run out before the decision",
    "hold_released": "the hold had been released before the decision",
    "hold_already_committed": "the hold had already become a booking",
}


# The words these pages use, explained once: term links carry the explanation as a tooltip and lead to
# the page's glossary (a tooltip alone is out of reach of keyboards and touch screens).
GLOSSARY = {
    "hold": (
        "Hold",
        "A temporary claim an agent puts on a time slot. While it lasts no other agent can have the slot "
        "(unless it has a higher priority); it becomes a booking when committed, or ends when released or "
        "when it runs out.",
    ),
    "gated": (
        "Hold waiting for approval",
        "A hold tied to an approval: it keeps the time blocked past its usual lifetime until someone "
        "decides, the approval expires or the agent withdraws it. Only an approval turns it into a booking.",
    ),
    "priority": (
        "Priority",
        "A number each agent acts with. An agent with a strictly higher priority may take over another "
        "agent's hold, or a booking still inside its bump window. Equal priorities never take over each "
        "other.",
    ),
    "bump_window": (
        "Bump window",
        "A short time after a booking is made during which a higher-priority agent can still take it over. "
        "The calendar sets its length.",
    ),
    "frozen": ("Frozen", "A booking past its bump window: no agent can take it over any more."),
    "taken_over": (
        "Taken over (evicted, bumped)",
        "A hold is evicted when a higher-priority agent, or an event in the owner's own calendar, takes its "
        "time; a booking is bumped when a higher-priority agent takes it inside its bump window.",
    ),
    "owner_calendar": (
        "Owner's own calendar",
        "A calendar linked to a person's Google, Microsoft or CalDAV calendar: that person's events block "
        "agents like a frozen booking.",
    ),
    "fencing_token": (
        "Fencing token",
        "The calendar's change number when the hold was placed. Every change to the calendar increases it, "
        "so the booking engine can refuse a commit from an agent acting on an out-of-date view.",
    ),
    "told": (
        "The agent is told",
        "The agent learns of the decision through a signed web request to the address it registered "
        "(a webhook), within seconds, and when it next asks.",
    ),
    "state": (
        "Agent's own notes",
        "Data the agent attached for itself. It is handed back with the decision, so the agent can pick up "
        "where it left off; it is not meant for people.",
    ),
}
TERMS = {key: explanation for key, (_, explanation) in GLOSSARY.items()}


def status_label(status: str) -> str:
    return STATUS_LABELS.get(status, status)


def may_decide(membership: Membership) -> bool:
    """Who may approve or deny: the role table's answer (accounts.roles)."""
    return membership.may(Permission.DECIDE_APPROVALS)


# --- The queue ----------------------------------------------------------------------------------------------


@dataclass
class QueueRow:
    approval: Approval
    when: str  # for an approval that gates a hold: the calendar and time it would book

    @property
    def status(self) -> str:
        # Only recent rows can be pending here: those whose time is up, awaiting the expiry sweep.
        return (
            ApprovalStatus.EXPIRED if self.approval.status == ApprovalStatus.PENDING else self.approval.status
        )

    @property
    def status_label(self) -> str:
        return status_label(self.status)

    @property
    def status_explained(self) -> str:
        return STATUS_EXPLAINED.get(self.status, "")


@workspace_page()
def queue(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Pending newest first, plus recent decisions. htmx polls the table partial to stay live."""
    # The queue never shows evidence: leave up to 128 KiB per row in the database.
    approvals = Approval.objects.select_related("agent").defer("evidence", "evidence_json", "state")
    pending = list(
        approvals.filter(workspace=workspace, status="pending", expires_at__gt=Now()).order_by("-created_at")
    )
    recent = list(
        approvals.filter(workspace=workspace)
        .exclude(status="pending", expires_at__gt=Now())
        .order_by("-created_at")[:RECENT_DECISIONS]
    )
    when = _booking_times(workspace, [*pending, *recent])
    template = "dashboard/approvals/queue.html"
    if request.htmx:
        template += "#queue-table"
    context = page_context(
        request,
        "approvals",
        pending=[QueueRow(a, when.get(a.hold_id or "", "")) for a in pending],
        recent=[QueueRow(a, when.get(a.hold_id or "", "")) for a in recent],
        poll_seconds=QUEUE_POLL_SECONDS,
    )
    return render(request, template, context)


def _booking_times(workspace: Workspace, approvals: list[Approval]) -> dict[str, str]:
    """By hold id, for approvals that gate a hold: "Sales team · Tue 3 Dec 2024, 14:00–14:30 (Europe/Berlin)".
    One query for the whole list."""
    hold_ids = [a.hold_id for a in approvals if a.hold_id]
    if not hold_ids:
        return {}
    primaries = Reservation.objects.filter(
        hold_id__in=hold_ids, is_primary=True, calendar__workspace=workspace
    ).select_related("calendar")
    times = {}
    for reservation in primaries:
        zone = calendar_zone(reservation.calendar)
        local = _local_range(reservation.start_time, reservation.end_time, zone)
        times[reservation.hold_id] = f"{reservation.calendar.name} · {local} ({zone.key})"
    return times


@require_GET
@workspace_page()
def pending_badge(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """The sidebar's pending count, polled by every page (base.html); app.js copies it into the tab title.

    One indexed count per poll; `?shown=N` answers 204 while the count is still N, so nothing is swapped.
    """
    count = pending_count(workspace)
    if request.GET.get("shown") == str(count):
        response = HttpResponse(status=204)
    else:
        response = render(
            request, "dashboard/approvals/_badge.html", {"workspace": workspace, "pending_count": count}
        )
    add_never_cache_headers(response)
    return response


# --- One approval: what it would do -------------------------------------------------------------------------


def _local_range(start: datetime, end: datetime, zone: ZoneInfo) -> str:
    """ "Tue 3 Dec 2024, 14:00–14:30", or with both dates when it crosses midnight."""
    local_start, local_end = start.astimezone(zone), end.astimezone(zone)
    first = f"{local_start:%a} {local_start.day} {local_start:%b %Y, %H:%M}"
    if local_end.date() == local_start.date():
        return f"{first}–{local_end:%H:%M}"
    return f"{first} – {local_end:%a} {local_end.day} {local_end:%b %Y, %H:%M}"


def _duration(start: datetime, end: datetime) -> str:
    minutes = round((end - start).total_seconds() / 60)
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def _seconds(seconds: int) -> str:
    """A calendar's bump window in words: "30 seconds", "2 minutes", "1.5 hours"; "" for none."""
    if seconds <= 0:
        return ""
    if seconds % 3600 == 0 or seconds > 3600:
        amount, unit = f"{seconds / 3600:g}", "hour"
    elif seconds % 60 == 0:
        amount, unit = str(seconds // 60), "minute"
    else:
        amount, unit = str(seconds), "second"
    return f"{amount} {unit}" + ("" if amount == "1" else "s")


def _attendee(value: Any) -> str:
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


@dataclass
class Busy:
    """Time the owner's own calendar is busy, overlapping the hold."""

    source: str
    start_time: datetime
    end_time: datetime
    local: str


@dataclass
class CalendarShare:
    """The hold's row on one calendar (a hold may span several), as a person reads it."""

    reservation: Reservation
    local: str  # the time in the calendar's own zone
    zone_name: str
    url: str
    busy: list[Busy] = field(default_factory=list)


@dataclass
class GatedBooking:
    """The booking an approval would make (or made): the hold it gates, and what stands in its way."""

    hold_id: str
    primary: Reservation
    shares: list[CalendarShare]
    utc: str
    duration: str
    attendees: list[str]
    more_attendees: int
    state: str  # the hold's state in plain words
    state_kind: str  # css: live | booked | gone
    problems: list[str]  # why approving now would make no booking, or what overlaps it

    @property
    def can_be_made(self) -> bool:
        return self.state_kind == "live"


def gated_booking(approval: Approval, now: datetime) -> GatedBooking | None:
    """What the approval's hold is now; None when it gates no hold (or the hold's rows are gone)."""
    if not approval.hold_id:
        return None
    rows = sorted(
        Reservation.objects.filter(hold_id=approval.hold_id, calendar__workspace_id=approval.workspace_id)
        .select_related("calendar", "agent", "displaced_by__agent")
        .order_by("id"),
        key=lambda r: (not r.is_primary, r.calendar.name, r.pk),
    )
    if not rows:
        return None
    primary = rows[0]
    span = Span(primary.start_time, primary.end_time)
    busy_by_calendar: dict[int, list[Busy]] = {}
    for block in BusyBlock.objects.filter(
        overlapping_q(span), calendar_id__in=[r.calendar_id for r in rows]
    ).order_by("start_time"):
        zone = calendar_zone(next(r.calendar for r in rows if r.calendar_id == block.calendar_id))
        busy_by_calendar.setdefault(block.calendar_id, []).append(
            Busy(
                provider_name(block.source),
                block.start_time,
                block.end_time,
                _local_range(block.start_time, block.end_time, zone),
            )
        )
    shares = []
    for row in rows:
        zone = calendar_zone(row.calendar)
        shares.append(
            CalendarShare(
                reservation=row,
                local=_local_range(row.start_time, row.end_time, zone),
                zone_name=zone.key,
                url=reservation_url(approval.workspace, row),
                busy=busy_by_calendar.get(row.calendar_id, []),
            )
        )
    state, kind, problems = _hold_state(primary, now)
    for share in shares:
        for busy in share.busy:
            calendar = share.reservation.calendar.name
            problems.append(f"The owner's own calendar ({busy.source}) is busy {busy.local} on {calendar}.")
    attendees = primary.attendees if isinstance(primary.attendees, list) else [primary.attendees]
    return GatedBooking(
        hold_id=approval.hold_id,
        primary=primary,
        shares=shares,
        utc=_local_range(primary.start_time, primary.end_time, ZoneInfo("UTC")) + " UTC",
        duration=_duration(primary.start_time, primary.end_time),
        attendees=[_attendee(a) for a in attendees[:MAX_ATTENDEES_SHOWN]],
        more_attendees=max(len(attendees) - MAX_ATTENDEES_SHOWN, 0),
        state=state,
        state_kind=kind,
        problems=problems,
    )


def _hold_state(row: Reservation, now: datetime) -> tuple[str, str, list[str]]:
    """The hold in plain words, a css kind, and what stops approving from making the booking."""
    status = row.status_at(now)
    if status == ReservationStatus.HELD:
        if row.awaiting_approval:
            return (
                "Held for this approval: the time stays blocked for other agents until it is decided.",
                "live",
                [],
            )
        return "Held.", "live", []
    if status == ReservationStatus.COMMITTED:
        booked = f"Booked ({row.booking_id})."
        if row.upstream_conflict_at is not None:
            return (
                booked,
                "booked",
                ["An event in the owner's own calendar now overlaps this booking (the booking is kept)."],
            )
        return booked, "booked", []
    if status == ReservationStatus.EVICTED:
        taker = row.displaced_by
        if taker is not None:
            who = f"{taker.agent.name}, priority {taker.priority} (higher than this hold's {row.priority})"
            reason = f"Taken over by {who}."
        else:
            reason = "Taken over by an event in the owner's own calendar."
        return reason, "gone", [f"{reason} Approving now cannot make this booking."]
    if status == ReservationStatus.EXPIRED:
        reason = "The hold ran out."
    elif status == ReservationStatus.RELEASED:
        reason = "The hold was released."
    elif status == ReservationStatus.BUMPED:
        reason = "Booked, then taken over by a higher-priority agent inside its bump window."
    elif status == ReservationStatus.CANCELLED:
        reason = "Booked, then cancelled."
    else:
        reason = f"The hold is {status}."
    if status in (ReservationStatus.BUMPED, ReservationStatus.CANCELLED):
        return reason, "gone", []
    return reason, "gone", [f"{reason} Approving now cannot make this booking."]


@dataclass
class EmailDraft:
    """A review-first email (inboxes.review): the message approving sends."""

    to: list[str]
    cc: list[str]
    subject: str
    text: str
    html: SafeString  # sanitized; "" when the draft has no HTML part
    in_reply_to: str
    invite_booking_id: str
    message: Message | None  # the draft in the agent's inbox this approval releases; None: not linked
    from_address: str
    thread_url: str


def _addresses(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, str) else _attendee(v) for v in value]


def email_draft(approval: Approval, evidence: Any, membership: Membership) -> EmailDraft | None:
    """The email preview for evidence shaped like a review-first draft. Only the draft's own link to this
    approval (Message.approval_id) proves that approving sends it: evidence alone is what the agent wrote."""
    if approval.hold_id or not isinstance(evidence, dict):
        return None
    message_id = evidence.get("message")
    if not (isinstance(message_id, str) and isinstance(evidence.get("to"), list)):
        return None
    if not isinstance(evidence.get("subject"), str) or not ("text" in evidence or "html" in evidence):
        return None
    message = (
        Message.objects.filter(
            public_id=message_id, agent_id=approval.agent_id, approval_id=approval.public_id
        )
        .select_related("thread")
        .first()
    )
    sender = message.from_address if message is not None and isinstance(message.from_address, dict) else None
    thread_url = ""
    if message is not None and membership.may(Permission.READ_INBOXES):
        thread_url = reverse(
            "dashboard:agent_inbox_thread",
            args=[approval.workspace.slug, approval.agent.public_id, message.thread.public_id],
        )
    text, html = evidence.get("text"), evidence.get("html")
    invite = evidence.get("invite")
    invite_booking = invite.get("booking_id") if isinstance(invite, dict) else None
    in_reply_to = evidence.get("in_reply_to")
    return EmailDraft(
        to=_addresses(evidence.get("to")),
        cc=_addresses(evidence.get("cc")),
        subject=evidence["subject"],
        text=text if isinstance(text, str) else "",
        # Agent-written, and possibly quoting a stranger's mail: never shown as it came.
        html=mark_safe(sanitize_html(html)) if isinstance(html, str) else mark_safe(""),  # noqa: S308
        in_reply_to=in_reply_to if isinstance(in_reply_to, str) else "",
        invite_booking_id=invite_booking if isinstance(invite_booking, str) else "",
        message=message,
        from_address=_attendee(sender) if sender else "",
        thread_url=thread_url,
    )


# --- Evidence, readable -------------------------------------------------------------------------------------


def evidence_html(value: Any) -> SafeString:
    """Agent-written JSON as nested lists: objects as term/value lists in the agent's key order, arrays as
    lists, long text folded. Every piece of text goes through format_html/escape; nothing the agent wrote
    becomes markup. Past MAX_DEPTH_SHOWN levels, MAX_ITEMS_SHOWN items or MAX_NODES_SHOWN values in all,
    the rest shows as a JSON snippet (the raw JSON is one click away)."""
    budget = [MAX_NODES_SHOWN]
    return _value_html(value, 0, budget)


def _value_html(value: Any, depth: int, budget: list[int]) -> SafeString:
    budget[0] -= 1
    if isinstance(value, (dict, list)) and value and (depth >= MAX_DEPTH_SHOWN or budget[0] <= 0):
        snippet = json.dumps(value, ensure_ascii=False)
        if len(snippet) > RAW_SNIPPET_CHARS:
            snippet = snippet[:RAW_SNIPPET_CHARS] + "…"
        return format_html('<code class="ev-raw" title="Shown in full in the raw JSON">{}</code>', snippet)
    if isinstance(value, dict):
        if not value:
            return format_html('<span class="ev-empty">{}</span>', "(empty)")
        shown = list(value.items())[:MAX_ITEMS_SHOWN]
        pairs = format_html_join(
            "",
            '<div class="ev-pair"><dt>{}</dt><dd>{}</dd></div>',
            ((key or "(empty key)", _value_html(item, depth + 1, budget)) for key, item in shown),
        )
        return format_html('<dl class="ev-object">{}{}</dl>', pairs, _more(len(value) - len(shown), "dl"))
    if isinstance(value, list):
        if not value:
            return format_html('<span class="ev-empty">{}</span>', "(none)")
        shown_items = value[:MAX_ITEMS_SHOWN]
        items = format_html_join(
            "", "<li>{}</li>", ((_value_html(item, depth + 1, budget),) for item in shown_items)
        )
        return format_html('<ul class="ev-list">{}{}</ul>', items, _more(len(value) - len(shown_items), "ul"))
    if isinstance(value, str):
        return _text_html(value)
    if isinstance(value, bool):
        return format_html(
            '<span class="ev-lit" title="{}">{}</span>', str(value).lower(), "yes" if value else "no"
        )
    if value is None:
        return format_html('<span class="ev-lit" title="{}">{}</span>', "null: no value", "—")
    return format_html('<span class="ev-num">{}</span>', json.dumps(value))


def _more(left_out: int, container: str) -> SafeString:
    if left_out <= 0:
        return mark_safe("")
    text = f"… and {left_out} more (see the raw JSON)"
    if container == "dl":
        return format_html('<div class="ev-pair ev-more"><dt>{}</dt><dd></dd></div>', text)
    return format_html('<li class="ev-more">{}</li>', text)


def _text_html(text: str) -> SafeString:
    if not text:
        return format_html('<span class="ev-empty">{}</span>', "(empty text)")
    if len(text) <= LONG_TEXT_CHARS and text.count("\n") < LONG_TEXT_LINES:
        return format_html('<span class="ev-str">{}</span>', text)
    preview = " ".join(text[: PREVIEW_CHARS * 2].split())[:PREVIEW_CHARS]
    return format_html(
        '<details class="ev-long"><summary><span class="ev-preview">{}…</span> '
        '<span class="ev-size">show all {} characters</span></summary><div class="ev-str">{}</div></details>',
        preview,
        f"{len(text):,}",
        text,
    )


def raw_json(value: Any) -> str:
    """Pretty JSON in the agent's key order (escaped by the template)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


# --- One approval: the page and its live parts --------------------------------------------------------------


def _approval(workspace: Workspace, approval_id: str) -> Approval:
    approval = (
        Approval.objects.select_related("agent", "workspace")
        .filter(workspace=workspace, public_id=approval_id)
        .first()
    )
    if approval is None:
        raise Http404("No such approval")
    return approval


def _decision_key(approval: Approval, now: datetime) -> str:
    return f"{approval.version}-{approval.status_at(now)}"


def _booking_key(booking: GatedBooking | None) -> str:
    if booking is None:
        return "-"
    facts = [
        (
            s.reservation.pk,
            s.reservation.status,
            s.reservation.version,
            [(b.start_time, b.end_time) for b in s.busy],
        )
        for s in booking.shares
    ]
    return hashlib.sha256(repr((facts, booking.state_kind)).encode()).hexdigest()[:16]


def _is_settled(approval: Approval, now: datetime) -> bool:
    """Nothing more will change on this page: decided, and an approved hold's outcome recorded."""
    status = approval.status_at(now)
    if status == ApprovalStatus.PENDING:
        return False
    if status == ApprovalStatus.APPROVED and approval.hold_id:
        return bool(approval.booking_id or approval.booking_error)
    return True


def _live_context(
    request: DashboardRequest, workspace: Workspace, approval: Approval, now: datetime
) -> dict[str, Any]:
    """What the polled parts of the page need: the decision, the booking, and the poll itself."""
    booking = gated_booking(approval, now)
    status = approval.status_at(now)
    decision_key, booking_key = _decision_key(approval, now), _booking_key(booking)
    poll_url = ""
    if not _is_settled(approval, now):
        base = reverse("dashboard:approval", args=[workspace.slug, approval.public_id])
        poll_url = f"{base}?{urlencode({'live': '1', 'decision': decision_key, 'booking': booking_key})}"
    return {
        "approval": approval,
        "status": status,
        "status_label": status_label(status),
        "status_explained": STATUS_EXPLAINED.get(status, ""),
        "decided_at": approval.decided_at_as_of(now),
        "booking": booking,
        "booking_error_text": BOOKING_ERRORS.get(approval.booking_error, approval.booking_error),
        "booking_url": _booking_url(workspace, approval, booking),
        "can_decide": may_decide(request.membership),
        "poll_url": poll_url,
        "poll_seconds": DETAIL_POLL_SECONDS,
        "decision_key": decision_key,
        "booking_key": booking_key,
        "note_max_chars": NOTE_MAX_CHARS,
        "terms": TERMS,
    }


def _booking_url(workspace: Workspace, approval: Approval, booking: GatedBooking | None) -> str:
    """The calendar day of the booking an approval made, when it made one."""
    if booking is None or not approval.booking_id:
        return ""
    return booking.shares[0].url


@workspace_page()
def detail(request: DashboardRequest, workspace: Workspace, approval_id: str) -> HttpResponse:
    """The page, or (`?live=1`, htmx's poll) only what changed since the keys it sends: 204 if nothing."""
    approval = _approval(workspace, approval_id)
    if request.htmx and request.GET.get("live"):
        return _live_update(request, workspace, approval)
    return _render_detail(request, workspace, approval)


def _live_update(request: DashboardRequest, workspace: Workspace, approval: Approval) -> HttpResponse:
    now = server_now()
    live = _live_context(request, workspace, approval, now)
    decision_changed = request.GET.get("decision") != live["decision_key"]
    booking_changed = request.GET.get("booking") != live["booking_key"]
    if not (decision_changed or booking_changed):
        response = HttpResponse(status=204)
    else:
        context = {
            **live,
            "workspace": workspace,
            "membership": request.membership,
            "decision_changed": decision_changed,
            "booking_changed": booking_changed,
            "pending_count": pending_count(workspace),
        }
        response = render(request, "dashboard/approvals/_live.html", context)
    add_never_cache_headers(response)
    return response


def _render_detail(
    request: DashboardRequest,
    workspace: Workspace,
    approval: Approval,
    *,
    confirm: str = "",
    note: str = "",
    note_error: str = "",
) -> HttpResponse:
    now = server_now()
    evidence = approval.evidence_in_order
    draft = email_draft(approval, evidence, request.membership)
    live = _live_context(request, workspace, approval, now)
    booking: GatedBooking | None = live["booking"]
    context = page_context(
        request,
        "approvals",
        **live,
        draft=draft,
        evidence=evidence_html(evidence) if draft is None else None,
        evidence_raw=raw_json(evidence),
        evidence_kept_in_order=bool(approval.evidence_json),
        state_raw=raw_json(approval.state) if approval.state is not None else "",
        bump_window=_seconds(booking.primary.calendar.bump_window_seconds) if booking else "",
        confirm=confirm,
        note=note,
        note_error=note_error,
        glossary=GLOSSARY,
    )
    response = render(request, "dashboard/approvals/detail.html", context)
    # The page shows agent-written content, and an email draft may quote a stranger's mail: the inbox
    # thread page's stricter policy applies here too.
    response["Content-Security-Policy"] = THREAD_PAGE_POLICY
    return response


@require_POST
@workspace_page()
def decide(request: DashboardRequest, workspace: Workspace, approval_id: str) -> HttpResponse:
    """Approve or deny, in two steps: the first POST shows what will happen and asks to confirm; only the
    second (`confirmed=yes`) decides.

    A confirm step rather than an undo window. A decision takes effect at once: approving commits the
    booking and the agent is told (webhook) in the same moment, and it may act on it straight away (send
    the invites, tell the customer); an approved email goes to the relay. An "undo" after that would be a
    lie: it could only cancel a booking the agent had already announced, or chase an email already sent.
    An honest undo would have to hold the decision back from everyone for the window (the agent waiting,
    the hold's pin running down, a second person seeing it still pending and deciding too) and apply it
    later from a worker. Confirming first states exactly what will happen before anything does, and the
    decision is then final, as the agent is told.
    """
    if not may_decide(request.membership):
        raise PermissionDenied("Your role can read approvals but not decide them.")
    approval = _approval(workspace, approval_id)  # 404 before anything else
    decision = request.POST.get("decision")
    note = request.POST.get("note", "")
    if request.POST.get("back"):
        return _render_detail(request, workspace, approval, note=note)
    if decision not in {"approve", "deny"}:
        messages.error(request, "Choose approve or deny.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    if len(note) > NOTE_MAX_CHARS:
        error = f"The note may be at most {NOTE_MAX_CHARS} characters (it has {len(note)})."
        return _render_detail(request, workspace, approval, note=note, note_error=error)
    if request.POST.get("confirmed") != "yes":
        return _render_detail(request, workspace, approval, confirm=decision, note=note)
    try:
        approval = approval_decide(
            approval_id=approval_id,
            workspace=workspace,
            user=request.user,
            approve=decision == "approve",
            note=note,
        )
    except ApprovalAlreadyDecided as exc:
        who = exc.decided_by_email or "someone else"
        messages.error(request, f"Already {exc.approval_status} by {who} — your decision was not applied.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    except ApprovalExpired:
        messages.error(request, "This request expired before it was decided; the agent has been told.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    verb = "Approved" if approval.status == "approved" else "Denied"
    outcome = ""
    if approval.booking_id:
        outcome = f" Booking {approval.booking_id} is made."
    elif approval.booking_error:
        outcome = (
            f" No booking was made: {BOOKING_ERRORS.get(approval.booking_error, approval.booking_error)}."
        )
    messages.success(request, f"{verb}: {approval.summary}.{outcome}")
    return redirect("dashboard:approvals", workspace.slug)
