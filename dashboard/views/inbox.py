"""Agents' inboxes as owners and admins see them: every agent's unread mail, one agent's threads, one
thread's messages, and attachment downloads.

Mail is private correspondence between an agent and outsiders, so these pages are for the workspace's
owners and admins only (`Permission.READ_INBOXES`: others get 403), the same people who hold the agents'
keys and could read the mail through the API anyway. Looking is not reading: these pages never set a message's
`read_at`, which records the agent fetching it.

Senders' HTML is shown inline, sanitized (inboxes.html), inside an element htmx ignores, on a page whose
Content-Security-Policy refuses every script but the dashboard's own and every image from elsewhere:
the sanitizer is the guard, the policy the second one if the sanitizer ever let something through.
Why not a sandboxed `<iframe srcdoc sandbox="">`: it isolates just as well, but a fully sandboxed
frame can neither be sized to its content (that needs script on both sides) nor open a link, so every
message would sit in a fixed-height scroll box with dead links; with nothing active left in the HTML,
the frame would only cost readability.
"""

from __future__ import annotations

import html as html_entities
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.paginator import Paginator
from django.db.models import Count, Exists, Max, OuterRef, Prefetch, Q, QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import strip_tags
from django.utils.http import urlencode

from accounts.roles import Permission
from bookings.models import Reservation
from dashboard.access import page_context, workspace_page
from dashboard.http import THREAD_PAGE_POLICY, DashboardRequest
from inboxes.addresses import workspace_domain
from inboxes.attachments import attachment_response
from inboxes.html import sanitize_html
from inboxes.models import Attachment, Direction, Message, MessageStatus, PartStat, Thread
from inboxes.quotas import quota_usage
from workspaces.models import Agent, Workspace

THREADS_PER_PAGE = 25
SNIPPET_CHARS = 140
MAX_QUERY_CHARS = 200


AUTH_VERDICT_CLASS = {"pass": "pass", "fail": "fail", "softfail": "fail", "permerror": "fail"}
STATUS_LABELS: dict[str, str] = {
    MessageStatus.QUEUED: "queued",
    MessageStatus.SENT: "sent",
    MessageStatus.FAILED: "failed",
    MessageStatus.NOT_SENT_NO_RELAY: "not sent: no relay",
    MessageStatus.AWAITING_APPROVAL: "awaiting approval",
    MessageStatus.DISCARDED: "discarded",
}
INVITE_METHODS = {"REQUEST": "Invitation", "REPLY": "Reply to an invitation", "CANCEL": "Cancellation"}
INVITE_FLAGS = {"cancelled_by_organizer": "Cancelled by the organizer"}
_WHITESPACE = re.compile(r"\s+")


# --- Read models -------------------------------------------------------------------------------------------


def _agent(workspace: Workspace, agent_id: str) -> Agent:
    agent = Agent.objects.filter(workspace=workspace, public_id=agent_id).first()
    if agent is None:
        raise Http404("No such agent")
    return agent


def address_label(address: Any) -> str:
    """`Name <address>`, or whichever part there is, from a stored {"name", "address"} pair."""
    if not isinstance(address, dict):
        return ""
    name, email = str(address.get("name") or ""), str(address.get("address") or "")
    if name and email:
        return f"{name} <{email}>"
    return name or email


def snippet(message: Message) -> str:
    """The start of what the message says: the reply without its quoted history, else the text, else the
    HTML's text."""
    body = message.reply_text or message.text
    if not body and message.html:
        body = html_entities.unescape(strip_tags(sanitize_html(message.html)))
    body = _WHITESPACE.sub(" ", body).strip()
    return body if len(body) <= SNIPPET_CHARS else body[: SNIPPET_CHARS - 1].rstrip() + "…"


def unread_q(prefix: str = "") -> Q:
    """Unread: inbound mail the agent has not fetched by its id yet (read_at is the API's to set)."""
    return Q(**{f"{prefix}direction": Direction.INBOUND, f"{prefix}read_at__isnull": True})


def thread_search(threads: QuerySet[Any], query: str) -> QuerySet[Any]:
    """Threads whose subject, counterpart, or any message's sender (name or address) contains `query`."""
    sender_matches = Message.objects.filter(thread=OuterRef("pk")).filter(
        Q(from_address__address__icontains=query) | Q(from_address__name__icontains=query)
    )
    return threads.filter(
        Q(subject__icontains=query) | Q(counterpart__icontains=query) | Exists(sender_matches)
    )


@dataclass
class ThreadRow:
    thread: Thread
    unread: int
    messages: int
    who: str
    snippet: str


def thread_rows(threads: list[Thread]) -> list[ThreadRow]:
    """Each thread with who wrote last and the start of the latest message: one query for the page."""
    latest = {
        message.thread_id: message
        for message in Message.objects.filter(thread__in=[t.pk for t in threads])
        .order_by("thread_id", "-received_at", "-pk")
        .distinct("thread_id")
        .only("thread_id", "direction", "from_address", "to", "text", "reply_text", "html")
    }
    rows = []
    for thread in threads:
        message = latest.get(thread.pk)
        who, summary = thread.counterpart, ""
        if message is not None:
            summary = snippet(message)
            if message.direction == Direction.OUTBOUND:
                recipient = address_label(message.to[0]) if message.to else ""
                who = f"To {recipient}" if recipient else "Sent by the agent"
            else:
                who = address_label(message.from_address) or thread.counterpart
        rows.append(
            ThreadRow(
                thread=thread,
                unread=getattr(thread, "unread", 0),
                messages=getattr(thread, "message_count", 0),
                who=who,
                snippet=summary,
            )
        )
    return rows


@dataclass
class InviteCard:
    method: str
    method_label: str
    summary: str
    start: datetime | None
    end: datetime | None
    organizer: str
    attendees: list[dict[str, str]]
    linked: str
    linked_url: str = ""
    linked_status: str = ""
    flags: list[str] = field(default_factory=list)


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    # Shown in UTC, as the dashboard shows every time outside a calendar's own timeline.
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _person(value: Any) -> str:
    """An organizer or attendee as stored: an address string, or a {"name", "email"/"address"} object."""
    if isinstance(value, dict):
        email = str(value.get("email") or value.get("address") or "").removeprefix("mailto:")
        name = str(value.get("name") or "")
        return f"{name} <{email}>" if name and email else name or email
    return str(value or "").removeprefix("mailto:")


def _partstat_class(status: str) -> str:
    """The CSS class for an attendee's answer: the sender writes PARTSTAT, so only a known value becomes
    a class name (anything else is shown as text, styled neutral)."""
    return status if status in PartStat.values else "unknown"


def invite_card(event: Any) -> InviteCard | None:
    """The invite card for a message's `calendar_event` (parsed from mail, so read defensively)."""
    if not isinstance(event, dict):
        return None
    method = str(event.get("method") or "").upper()
    attendees = []
    for entry in event.get("attendees") or []:
        if isinstance(entry, dict):
            status = str(entry.get("status") or "needs-action").lower()
            attendees.append(
                {"who": _person(entry), "status": status, "status_class": _partstat_class(status)}
            )
    flags = [event["flag"]] if isinstance(event.get("flag"), str) and event["flag"] else []
    flags += [name for name in INVITE_FLAGS if event.get(name) is True and name not in flags]
    return InviteCard(
        method=method,
        method_label=INVITE_METHODS.get(method, method.title() or "Calendar event"),
        summary=str(event.get("summary") or ""),
        start=_moment(event.get("start_time")),
        end=_moment(event.get("end_time")),
        organizer=_person(event.get("organizer")),
        attendees=attendees,
        linked=str(event.get("linked") or ""),
        flags=[INVITE_FLAGS.get(flag, flag.replace("_", " ")) for flag in flags],
    )


def link_reservations(workspace: Workspace, cards: list[InviteCard]) -> None:
    """Point each card's linked hold or booking at the calendar day that shows it (one query)."""
    linked = {card.linked for card in cards if card.linked}
    if not linked:
        return
    reservations: dict[str, Reservation] = {}
    for reservation in (
        Reservation.objects.filter(Q(hold_id__in=linked) | Q(booking_id__in=linked))
        .filter(calendar__workspace=workspace, is_primary=True)
        .select_related("calendar")
    ):
        reservations[reservation.hold_id] = reservation
        if reservation.booking_id:
            reservations[reservation.booking_id] = reservation
    for card in cards:
        shown = reservations.get(card.linked)
        if shown is None:
            continue
        try:
            zone = ZoneInfo(shown.calendar.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            zone = ZoneInfo("UTC")
        day = shown.start_time.astimezone(zone).date().isoformat()
        url = reverse("dashboard:calendar", args=[workspace.slug, shown.calendar.public_id])
        card.linked_url = f"{url}?{urlencode({'view': 'day', 'date': day})}"
        card.linked_status = shown.status


@dataclass
class MessageView:
    message: Message
    sender: str
    to: list[str]
    cc: list[str]
    html: str
    auth: list[tuple[str, str, str]]  # (method, verdict, css class)
    invite: InviteCard | None
    status_label: str


def message_view(message: Message) -> MessageView:
    verdicts = message.auth_results if isinstance(message.auth_results, dict) else {}
    auth = []
    for method in ("spf", "dkim", "dmarc"):
        verdict = str(verdicts.get(method) or "none")
        auth.append((method.upper(), verdict, AUTH_VERDICT_CLASS.get(verdict, "none")))
    return MessageView(
        message=message,
        sender=address_label(message.from_address),
        to=[address_label(a) for a in message.to],
        cc=[address_label(a) for a in message.cc],
        html=sanitize_html(message.html),
        auth=auth,
        invite=invite_card(message.calendar_event),
        status_label=STATUS_LABELS.get(message.status, message.status.replace("_", " ")),
    )


# --- Pages -------------------------------------------------------------------------------------------------


@workspace_page(needs=Permission.READ_INBOXES)
def overview(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Every agent's inbox in the workspace, with unread and thread counts."""
    agents = list(Agent.objects.filter(workspace=workspace).order_by("-is_active", "name", "id"))
    mail: dict[int, dict[str, Any]] = {
        row["agent_id"]: dict(row)
        for row in Message.objects.filter(agent__workspace=workspace)
        .values("agent_id")
        .annotate(unread=Count("id", filter=unread_q()), total=Count("id"), last=Max("received_at"))
    }
    threads = dict(
        Thread.objects.filter(agent__workspace=workspace)
        .values("agent_id")
        .annotate(n=Count("id"))
        .values_list("agent_id", "n")
    )
    domain = workspace_domain(workspace)
    no_mail: dict[str, Any] = {"unread": 0, "total": 0, "last": None}
    rows = [
        {
            "agent": agent,
            "address": f"{agent.slug}@{domain}",
            "unread": mail.get(agent.pk, no_mail)["unread"],
            "last_message_at": mail.get(agent.pk, no_mail)["last"],
            "threads": threads.get(agent.pk, 0),
        }
        for agent in agents
    ]
    context = page_context(
        request, "inboxes", rows=rows, total_unread=sum(row["unread"] for row in rows), domain=domain
    )
    return render(request, "dashboard/inbox/overview.html", context)


@workspace_page(needs=Permission.READ_INBOXES)
def thread_list(request: DashboardRequest, workspace: Workspace, agent_id: str) -> HttpResponse:
    """`?q=` searches senders and subjects (htmx refreshes the results as one types); `?page=N`."""
    agent = _agent(workspace, agent_id)
    query = request.GET.get("q", "").strip()[:MAX_QUERY_CHARS]
    threads: QuerySet[Any] = Thread.objects.filter(agent=agent).annotate(
        unread=Count("messages", filter=unread_q("messages__")), message_count=Count("messages")
    )
    if query:
        threads = thread_search(threads, query)
    # Newest activity first: a thread with a new reply comes back to the top.
    page = Paginator(threads.order_by("-last_message_at", "-pk"), THREADS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    inbox_url = reverse("dashboard:agent_inbox", args=[workspace.slug, agent.public_id])
    context = page_context(
        request,
        "inboxes",
        agent=agent,
        address=f"{agent.slug}@{workspace_domain(workspace)}",
        rows=thread_rows(list(page.object_list)),
        page=page,
        query=query,
        inbox_url=inbox_url,
        previous_query=_page_query(query, page.previous_page_number()) if page.has_previous() else "",
        next_query=_page_query(query, page.next_page_number()) if page.has_next() else "",
    )
    template = "dashboard/inbox/threads.html"
    if request.htmx:
        template += "#thread-results"
    else:
        context["quota"] = quota_usage(agent)
    return render(request, template, context)


def _page_query(query: str, page_number: int) -> str:
    params: dict[str, str | int] = {"q": query, "page": page_number} if query else {"page": page_number}
    return urlencode(params)


@workspace_page(needs=Permission.READ_INBOXES)
def thread_view(
    request: DashboardRequest, workspace: Workspace, agent_id: str, thread_id: str
) -> HttpResponse:
    agent = _agent(workspace, agent_id)
    thread = Thread.objects.filter(agent=agent, public_id=thread_id).first()
    if thread is None:
        raise Http404("No such thread")
    messages = (
        Message.objects.filter(agent=agent, thread=thread)
        .prefetch_related(Prefetch("attachments", queryset=Attachment.objects.order_by("pk")))
        .order_by("received_at", "pk")
    )
    views = [message_view(message) for message in messages]
    link_reservations(workspace, [view.invite for view in views if view.invite is not None])
    context = page_context(
        request,
        "inboxes",
        agent=agent,
        thread=thread,
        views=views,
        inbox_url=reverse("dashboard:agent_inbox", args=[workspace.slug, agent.public_id]),
    )
    response = render(request, "dashboard/inbox/thread.html", context)
    response["Content-Security-Policy"] = THREAD_PAGE_POLICY
    return response


@workspace_page(needs=Permission.READ_INBOXES)
def attachment_download(
    request: DashboardRequest, workspace: Workspace, agent_id: str, message_id: str, attachment_id: str
) -> HttpResponse:
    """Always a download (never shown in the dashboard's origin), under a type that cannot be sniffed."""
    agent = _agent(workspace, agent_id)
    attachment = Attachment.objects.filter(
        public_id=attachment_id, message__public_id=message_id, message__agent=agent
    ).first()
    if attachment is None or not attachment.file:
        raise Http404("No such attachment")
    return attachment_response(attachment)
