"""Composing: an agent's new message or reply is checked (recipients, one-line headers), admitted by the
agent's quotas and stored as a queued outbound Message — or, for a review-first agent, as a draft awaiting
a person's approval (inboxes.review) — in one transaction; its delivery (inboxes.delivery) is enqueued
after commit. Every header value written is one line (agentcal.text.is_one_line): refused where an agent
gives it, collapsed where we derive it (a reply's subject, a display name).
"""

from __future__ import annotations

import email.parser
import email.policy
import email.utils
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from agentcal.errors import InvalidRequest, QuotaExceeded
from agentcal.text import is_one_line, one_line
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.addresses import agent_address, workspace_domain
from inboxes.delivery import enqueue_delivery
from inboxes.invites import invite_request, invite_sent
from inboxes.models import Direction, Message, MessageStatus, Thread
from inboxes.parsing import normalize_subject
from inboxes.quotas import quota_claim
from inboxes.review import review_check, review_if_asked
from workspaces.actor import Actor
from workspaces.models import Agent

MAX_RECIPIENTS = 50
# The RFC 5322 addr-spec in its dot-atom form (quoted local parts and domain literals are not accepted).
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
ADDR_SPEC = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*@{_LABEL}(?:\.{_LABEL})+", re.ASCII)
NO_AUTH = {"spf": "none", "dkim": "none", "dmarc": "none"}


def header_safe(value: str) -> bool:
    """One line (agentcal.text.is_one_line): a header value with a line break in it could start a
    header of its own."""
    return is_one_line(value)


def valid_address(value: str) -> bool:
    return header_safe(value) and len(value) <= 320 and ADDR_SPEC.fullmatch(value) is not None


def _entries(addresses: Iterable[str]) -> list[dict[str, str]]:
    return [{"name": "", "address": a} for a in addresses]


def _unique(addresses: Iterable[str], *, without: str = "") -> list[str]:
    seen = {without.lower()} if without else set()
    result = []
    for address in addresses:
        if address and address.lower() not in seen:
            seen.add(address.lower())
            result.append(address)
    return result


def _check_recipients(addresses: list[str]) -> None:
    # `errors` names "recipients": the rule spans to and cc, and is more than a JSON Schema can state.
    if not addresses:
        raise InvalidRequest("The message has no recipient.", errors={"recipients": ["none given"]})
    if len(addresses) > MAX_RECIPIENTS:
        detail = f"At most {MAX_RECIPIENTS} recipients (to and cc together)."
        raise InvalidRequest(detail, errors={"recipients": [detail]})
    bad = [a for a in addresses if not valid_address(a)]
    if bad:
        raise InvalidRequest("Not an email address (RFC 5322 addr-spec).", errors={"recipients": bad[:5]})


def message_send(
    *,
    agent: Agent,
    to: list[str],
    cc: list[str],
    subject: str,
    text: str,
    html: str = "",
    actor: Actor | None = None,
    invite_booking_id: str | None = None,
) -> Message:
    """Queue a new message in a new thread (or, for a review-first agent, submit it for approval).
    Raises QuotaExceeded (audited) over one of the agent's quotas. With `invite_booking_id` it carries
    that booking's calendar invite (inboxes.invites; NotFound, BookingNotLive)."""
    _check_recipients([*to, *cc])
    if not header_safe(subject):
        raise InvalidRequest("The subject must be one line (no line breaks).")
    actor = actor or Actor(workspace=agent.workspace, agent=agent)
    with _quota_refusal_audited(actor), transaction.atomic(durable=True):
        invite = None
        if invite_booking_id is not None:
            invite = invite_request(
                agent=agent, booking_id=invite_booking_id, recipients=[*to, *cc], subject=subject
            )
        thread = Thread.objects.create(
            agent=agent,
            subject=subject,
            normalized_subject=normalize_subject(subject),
            counterpart=to[0].lower(),
        )
        message = message_queue(
            agent=agent,
            thread=thread,
            to=to,
            cc=cc,
            subject=subject,
            text=text,
            html=html,
            parent=None,
            calendar_event=invite.event if invite else None,
            invite_booking_id=invite_booking_id,
        )
        if invite is not None:
            invite_sent(invite, message)
    return review_if_asked(message, actor)


def message_reply(
    *,
    agent: Agent,
    parent: Message,
    text: str,
    html: str = "",
    reply_all: bool = False,
    actor: Actor | None = None,
) -> Message:
    """Queue a reply to `parent` (one of the agent's own messages) in the parent's thread (or, for a
    review-first agent, submit it for approval). Raises QuotaExceeded (audited) over a quota."""
    own = agent_address(agent)
    if parent.direction == Direction.OUTBOUND:
        to = [a["address"] for a in parent.to]
        cc = [a["address"] for a in parent.cc] if reply_all else []
    else:
        reply_to = _reply_to(parent)
        sender = parent.from_address["address"] if parent.from_address else ""
        to = reply_to or [sender]
        cc = [a["address"] for a in (*parent.to, *parent.cc)] if reply_all else []
    to = _unique(to, without=own)
    cc = _unique(cc, without=own)
    cc = [a for a in cc if a.lower() not in {t.lower() for t in to}]
    _check_recipients([*to, *cc])
    subject = parent.subject
    if not subject.lower().startswith("re:"):
        subject = f"Re: {subject}"
    # A stranger's subject may hold any line break the email package would write as a new header line
    # (\v, U+2028, ...): collapsed to one line, as it will be sent.
    subject = one_line(subject)
    actor = actor or Actor(workspace=agent.workspace, agent=agent)
    with _quota_refusal_audited(actor), transaction.atomic(durable=True):
        message = message_queue(
            agent=agent,
            thread=parent.thread,
            to=to,
            cc=cc,
            subject=subject,
            text=text,
            html=html,
            parent=parent,
        )
    return review_if_asked(message, actor)


@contextmanager
def _quota_refusal_audited(actor: Actor) -> Iterator[None]:
    """Audit a send refused over a quota, with which one, once its transaction has rolled back."""
    try:
        yield
    except QuotaExceeded as exc:
        with transaction.atomic():
            audit_record(
                event_type=AuditEvent.INBOX_MESSAGE_REJECTED,
                outcome=Outcome.REJECTED,
                actor=actor,
                http_status=exc.status,
                failure_reason=exc.code,
                details={
                    "agent": actor.agent_public_id,
                    "quota": exc.quota,
                    "limit": exc.limit,
                    "window_seconds": exc.window_seconds,
                    "retry_after": exc.retry_after_seconds,
                },
            )
        exc.audited = True
        raise


def _reply_to(parent: Message) -> list[str]:
    if parent.raw is None:
        return []
    # Its headers only: the whole of a stranger's MIME structure (thousands of parts, nested past Python's
    # recursion limit) is no business of a reply's.
    headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(bytes(parent.raw.raw))
    values = headers.get_all("Reply-To") or []
    return [address for _, address in email.utils.getaddresses([str(v) for v in values]) if address]


def message_queue(
    *,
    agent: Agent,
    thread: Thread,
    to: list[str],
    cc: list[str],
    subject: str,
    text: str,
    html: str,
    parent: Message | None,
    calendar_event: dict[str, Any] | None = None,
    invite_booking_id: str | None = None,
) -> Message:
    """Store one outbound message in the caller's transaction, the path every one takes (a send, a
    reply, an invite's CANCEL): the agent's quotas and review-first apply. The caller then hands the
    committed message to inboxes.review.review_if_asked."""
    # Serialises the agent's sends until this transaction ends; raises QuotaExceeded over a quota.
    admitted_at = quota_claim(agent=agent, recipients=[*to, *cc])
    review_first = agent.inbox_review_first
    # make_msgid returns "<...>"; we store ids without the brackets, as inbound parsing does.
    message_id = email.utils.make_msgid(domain=workspace_domain(agent.workspace)).strip("<>")
    references = [*parent.references, parent.message_id] if parent and parent.message_id else []
    message = Message.objects.create(
        agent=agent,
        thread=thread,
        raw=None,
        direction=Direction.OUTBOUND,
        # Review first: a draft that waits for a person's approval (inboxes.review), not delivered yet.
        status=MessageStatus.AWAITING_APPROVAL if review_first else MessageStatus.QUEUED,
        message_id=message_id,
        in_reply_to=parent.message_id if parent else "",
        references=references,
        from_address={"name": one_line(agent.name), "address": agent_address(agent)},
        to=_entries(to),
        cc=_entries(cc),
        subject=subject,
        text=text,
        html=html,
        reply_text=text,
        auth_results=NO_AUTH,
        untrusted=False,  # written by the agent itself
        # The database's time the quota admitted it: quotas count sends by it.
        received_at=admitted_at,
        next_attempt_at=admitted_at,
        calendar_event=calendar_event,
        invite_booking_id=invite_booking_id,
    )
    if review_first:
        review_check(message)  # too large to review: refused, and this transaction rolls back
    Thread.objects.filter(pk=thread.pk).update(last_message_at=Now())
    audit_record(
        event_type=(
            AuditEvent.INBOX_MESSAGE_AWAITING_APPROVAL if review_first else AuditEvent.INBOX_MESSAGE_QUEUED
        ),
        outcome=Outcome.SUCCESS,
        actor=None,
        workspace_id=agent.workspace_id,
        details={
            "agent": agent.public_id,
            "message": message.public_id,
            "thread": thread.public_id,
            "recipients": len(to) + len(cc),
        },
    )
    if not review_first:
        transaction.on_commit(partial(enqueue_delivery, message.pk))
    return message
