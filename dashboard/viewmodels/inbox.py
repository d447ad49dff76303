"""What the inbox pages show: each agent's mail at a glance, a thread list's rows (who wrote last, the
start of the latest message), and a thread's messages with their authentication verdicts and invite
cards (parsed from mail, so read defensively)."""

from __future__ import annotations

import html as html_entities
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.utils.html import strip_tags

from bookings.selectors import primaries_by_id
from dashboard.links import calendar_day_url
from dashboard.timeline import calendar_zone
from inboxes.html import sanitize_html
from inboxes.models import Direction, Message, MessageStatus, PartStat, Thread
from inboxes.selectors import latest_messages, mail_by_agent, threads_by_agent
from workspaces.models import Agent, Workspace
from workspaces.selectors import workspace_agents

SNIPPET_CHARS = 140

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


# --- Threads -------------------------------------------------------------------------------------------


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


@dataclass
class ThreadRow:
    thread: Thread
    unread: int
    messages: int
    who: str
    snippet: str


def thread_rows(threads: list[Thread]) -> list[ThreadRow]:
    """Each thread with who wrote last and the start of the latest message: one query for the page."""
    latest = latest_messages(threads)
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
    reservations = primaries_by_id(workspace, linked)
    for card in cards:
        shown = reservations.get(card.linked)
        if shown is None:
            continue
        day = shown.start_time.astimezone(calendar_zone(shown.calendar)).date()
        card.linked_url = calendar_day_url(workspace, shown.calendar, day)
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


def inbox_rows(workspace: Workspace, domain: str) -> list[dict[str, Any]]:
    """Every agent's inbox: its address at `domain`, its unread mail, its latest message, its threads."""
    agents: list[Agent] = workspace_agents(workspace)
    mail = mail_by_agent(workspace)
    threads = threads_by_agent(workspace)
    no_mail: dict[str, Any] = {"unread": 0, "total": 0, "last": None}
    return [
        {
            "agent": agent,
            "address": f"{agent.slug}@{domain}",
            "unread": mail.get(agent.pk, no_mail)["unread"],
            "last_message_at": mail.get(agent.pk, no_mail)["last"],
            "threads": threads.get(agent.pk, 0),
        }
        for agent in agents
    ]
