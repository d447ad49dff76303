"""What people's pages read of agents' mail: counts per agent, an agent's threads (searched), a thread's
messages, an attachment, and the draft an approval releases."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Prefetch, Q, QuerySet

from inboxes.models import Attachment, Direction, Message, Thread
from workspaces.models import Agent, Workspace


def unread_q(prefix: str = "") -> Q:
    """Unread: inbound mail the agent has not fetched by its id yet (read_at is the API's to set)."""
    return Q(**{f"{prefix}direction": Direction.INBOUND, f"{prefix}read_at__isnull": True})


def mail_by_agent(workspace: Workspace) -> dict[int, dict[str, Any]]:
    """Per agent id: its `unread` and `total` messages and when the `last` arrived (agents with none are
    left out)."""
    return {
        row["agent_id"]: dict(row)
        for row in Message.objects.filter(agent__workspace=workspace)
        .values("agent_id")
        .annotate(unread=Count("id", filter=unread_q()), total=Count("id"), last=Max("received_at"))
    }


def threads_by_agent(workspace: Workspace) -> dict[int, int]:
    """Per agent id: how many threads it has (agents with none are left out)."""
    return dict(
        Thread.objects.filter(agent__workspace=workspace)
        .values("agent_id")
        .annotate(n=Count("id"))
        .values_list("agent_id", "n")
    )


def agent_threads(agent: Agent, *, query: str) -> QuerySet[Any]:
    """The agent's threads, newest activity first (a thread with a new reply comes back to the top), each
    with its `unread` and `message_count`; with a `query`, those whose subject, counterpart, or any
    message's sender (name or address) contains it."""
    threads: QuerySet[Any] = Thread.objects.filter(agent=agent).annotate(
        unread=Count("messages", filter=unread_q("messages__")), message_count=Count("messages")
    )
    if query:
        sender_matches = Message.objects.filter(thread=OuterRef("pk")).filter(
            Q(from_address__address__icontains=query) | Q(from_address__name__icontains=query)
        )
        threads = threads.filter(
            Q(subject__icontains=query) | Q(counterpart__icontains=query) | Exists(sender_matches)
        )
    return threads.order_by("-last_message_at", "-pk")


def latest_messages(threads: Iterable[Thread]) -> dict[int, Message]:
    """Each thread's latest message by thread id (only what a thread list shows of it), in one query."""
    return {
        message.thread_id: message
        for message in Message.objects.filter(thread__in=[t.pk for t in threads])
        .order_by("thread_id", "-received_at", "-pk")
        .distinct("thread_id")
        .only("thread_id", "direction", "from_address", "to", "text", "reply_text", "html")
    }


def agent_thread(agent: Agent, public_id: str) -> Thread | None:
    return Thread.objects.filter(agent=agent, public_id=public_id).first()


def thread_messages(agent: Agent, thread: Thread) -> QuerySet[Message]:
    """Oldest first, with their attachments."""
    return (
        Message.objects.filter(agent=agent, thread=thread)
        .prefetch_related(Prefetch("attachments", queryset=Attachment.objects.order_by("pk")))
        .order_by("received_at", "pk")
    )


def agent_attachment(agent: Agent, *, message_id: str, attachment_id: str) -> Attachment | None:
    return Attachment.objects.filter(
        public_id=attachment_id, message__public_id=message_id, message__agent=agent
    ).first()


def draft_for_approval(*, message_id: str, agent_id: int, approval_id: str) -> Message | None:
    """The agent's review-first draft `message_id` with its thread, if it is the one the approval
    `approval_id` releases (its own link, Message.approval_id, not what the agent wrote, proves that)."""
    return (
        Message.objects.filter(public_id=message_id, agent_id=agent_id, approval_id=approval_id)
        .select_related("thread")
        .first()
    )
