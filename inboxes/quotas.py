"""Per-agent send quotas (a burst, sends per 24 hours, distinct recipients per 24 hours) and the inbound
storage limit: each agent's own, or the installation's defaults in settings where the agent has none.

`quota_claim` is called in the sending transaction and holds the limits exactly under concurrency (a
per-agent advisory lock). Windows are rolling at the database's clock, so a refusal's `retry_after` is
exact. Every outbound message of the agent counts except discarded ones, drafts awaiting approval
included.

Design: docs/architecture.md, "Quotas".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum

from agentcal.errors import InvalidRequest, QuotaExceeded
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.models import Direction, Message, MessageStatus
from workspaces.actor import Actor
from workspaces.models import Agent

DAILY_WINDOW_SECONDS = 24 * 3600
# What the agent's columns hold (PositiveIntegerField; PositiveBigIntegerField for storage).
MAX_LIMIT = 2**31 - 1
MAX_STORAGE_LIMIT_BYTES = 2**63 - 1
# First key of the advisory lock that serialises one agent's sends ("MAIL").
_SEND_LOCK_NAMESPACE = 0x4D41494C


@dataclass(frozen=True)
class InboxLimits:
    burst: int
    burst_window_seconds: int
    daily_sends: int
    daily_recipients: int
    storage_bytes: int


def default_limits() -> InboxLimits:
    """The installation's limits, for agents that have none of their own."""
    return InboxLimits(
        burst=settings.INBOX_BURST_LIMIT,
        burst_window_seconds=settings.INBOX_BURST_WINDOW_SECONDS,
        daily_sends=settings.INBOX_DAILY_SEND_LIMIT,
        daily_recipients=settings.INBOX_DAILY_RECIPIENT_LIMIT,
        storage_bytes=settings.INBOX_STORAGE_LIMIT_BYTES,
    )


def inbox_limits(agent: Agent) -> InboxLimits:
    """The agent's own limits, the installation's defaults where the agent has none."""
    defaults = default_limits()

    def own_or_default(value: int | None, default: int) -> int:
        return default if value is None else value

    return InboxLimits(
        burst=own_or_default(agent.inbox_burst_limit, defaults.burst),
        burst_window_seconds=defaults.burst_window_seconds,
        daily_sends=own_or_default(agent.inbox_daily_send_limit, defaults.daily_sends),
        daily_recipients=own_or_default(agent.inbox_daily_recipient_limit, defaults.daily_recipients),
        storage_bytes=own_or_default(agent.inbox_storage_limit_bytes, defaults.storage_bytes),
    )


def quota_usage(agent: Agent) -> dict[str, Any]:
    """The agent's limits and how much of each is used now (for GET /v1/inbox and the dashboard)."""
    limits = inbox_limits(agent)
    now = _database_now()
    sends = _counted_sends(agent, since=now - timedelta(seconds=DAILY_WINDOW_SECONDS))
    return {
        "burst_limit": limits.burst,
        "burst_window_seconds": limits.burst_window_seconds,
        "sent_in_burst_window": sends.filter(
            received_at__gt=now - timedelta(seconds=limits.burst_window_seconds)
        ).count(),
        "daily_limit": limits.daily_sends,
        "daily_window_seconds": DAILY_WINDOW_SECONDS,
        "sent_today": sends.count(),
        "daily_recipient_limit": limits.daily_recipients,
        "recipients_today": len(
            _recipients_last_used(agent, since=now - timedelta(seconds=DAILY_WINDOW_SECONDS))
        ),
        "storage_limit_bytes": limits.storage_bytes,
        "storage_used_bytes": storage_used_bytes(agent),
    }


def storage_used_bytes(agent: Agent) -> int:
    """Bytes of inbound mail the agent keeps (each raw message counted once per recipient agent)."""
    used = Message.objects.filter(agent=agent, direction=Direction.INBOUND).aggregate(total=Sum("size"))
    return int(used["total"] or 0)


def storage_full(agent: Agent) -> bool:
    """True when the agent's inbound mail has reached its storage limit: new mail is refused."""
    return storage_used_bytes(agent) >= inbox_limits(agent).storage_bytes


@transaction.atomic(durable=True)
def inbox_settings_update(
    *,
    actor: Actor,
    agent: Agent,
    review_first: bool,
    burst_limit: int | None,
    daily_send_limit: int | None,
    daily_recipient_limit: int | None,
    storage_limit_bytes: int | None,
) -> Agent:
    """A person sets the agent's review-first switch and its own limits (None: the installation default).
    Audited (agent.updated, with what changed) only when something changed; applies to the next send."""
    wanted: dict[str, bool | int | None] = {
        "inbox_review_first": review_first,
        "inbox_burst_limit": burst_limit,
        "inbox_daily_send_limit": daily_send_limit,
        "inbox_daily_recipient_limit": daily_recipient_limit,
        "inbox_storage_limit_bytes": storage_limit_bytes,
    }
    errors = {
        field: [f"Must be blank or a whole number from 0 to {ceiling}."]
        for field, ceiling in (
            ("inbox_burst_limit", MAX_LIMIT),
            ("inbox_daily_send_limit", MAX_LIMIT),
            ("inbox_daily_recipient_limit", MAX_LIMIT),
            ("inbox_storage_limit_bytes", MAX_STORAGE_LIMIT_BYTES),
        )
        if (value := wanted[field]) is not None and not 0 <= int(value) <= ceiling
    }
    if errors:
        raise InvalidRequest("Some limits are not valid; see `errors`.", errors=errors)
    current = Agent.objects.select_for_update().get(pk=agent.pk, workspace=actor.workspace)
    changes = {
        field: [getattr(current, field), value]
        for field, value in wanted.items()
        if getattr(current, field) != value
    }
    if not changes:
        return current
    for field, (_, value) in changes.items():
        setattr(current, field, value)
    current.save(update_fields=list(changes))
    audit_record(
        event_type=AuditEvent.AGENT_UPDATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={"agent_id": current.public_id, "changes": changes},
    )
    return current


def quota_claim(*, agent: Agent, recipients: list[str]) -> datetime:
    """Check that one more message to `recipients` fits the agent's quotas, or raise QuotaExceeded.

    Must run inside the transaction that then stores the message: it takes the agent's send lock, held
    until that transaction ends, so the count it sees cannot change before the message is stored.
    Returns the database's time after the lock was granted; store it as the message's `received_at`, so
    sends are counted in the order they were admitted.
    """
    assert connection.in_atomic_block, "quota_claim must run in the transaction that stores the message"
    limits = inbox_limits(agent)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_SEND_LOCK_NAMESPACE, agent.public_id]
        )
        # clock_timestamp(), not now(): now() is when the transaction began, perhaps before the lock wait.
        cursor.execute("SELECT clock_timestamp()")
        now: datetime = cursor.fetchone()[0]
    refusals = [
        refusal
        for refusal in (
            _sends_refusal(
                agent, quota="burst", limit=limits.burst, window_seconds=limits.burst_window_seconds, now=now
            ),
            _sends_refusal(
                agent,
                quota="daily_sends",
                limit=limits.daily_sends,
                window_seconds=DAILY_WINDOW_SECONDS,
                now=now,
            ),
            _recipients_refusal(agent, recipients=recipients, limit=limits.daily_recipients, now=now),
        )
        if refusal is not None
    ]
    if refusals:
        # The one that binds longest: waiting for it is enough for all. A refusal that waiting cannot cure
        # (retry_after None) binds forever.
        raise max(
            refusals, key=lambda r: math.inf if r.retry_after_seconds is None else r.retry_after_seconds
        )
    return now


def _database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now: datetime = cursor.fetchone()[0]
    return now


def _counted_sends(agent: Agent, *, since: datetime) -> Any:
    # Served by the partial index message_agent_outbound (agent, received_at) WHERE outbound.
    return Message.objects.filter(agent=agent, direction=Direction.OUTBOUND, received_at__gt=since).exclude(
        status=MessageStatus.DISCARDED
    )


def _seconds_until(moment: datetime, now: datetime) -> int:
    # At least 1: a client told 0 would come straight back and be refused again.
    return max(1, math.ceil((moment - now).total_seconds()))


def _sends_refusal(
    agent: Agent, *, quota: str, limit: int, window_seconds: int, now: datetime
) -> QuotaExceeded | None:
    window = timedelta(seconds=window_seconds)
    sends = _counted_sends(agent, since=now - window)
    count = sends.count()
    if count < limit:
        return None
    if limit == 0:
        return QuotaExceeded(
            f"Sending is switched off for this agent (its {quota} limit is 0).",
            quota=quota,
            limit=limit,
            window_seconds=window_seconds,
            retry_after_seconds=None,
        )
    # One more fits once count - limit + 1 of them have left the window: the (count - limit)-th oldest
    # (0-based) is the last of those to leave. Usually count == limit, so it is the oldest.
    leaves_at = sends.order_by("received_at").values_list("received_at", flat=True)[count - limit]
    return QuotaExceeded(
        f"This agent may send {limit} messages per {_window_name(window_seconds)}; "
        f"{count} were sent in the last one.",
        quota=quota,
        limit=limit,
        window_seconds=window_seconds,
        retry_after_seconds=_seconds_until(leaves_at + window, now),
    )


def _recipients_refusal(
    agent: Agent, *, recipients: list[str], limit: int, now: datetime
) -> QuotaExceeded | None:
    window = timedelta(seconds=DAILY_WINDOW_SECONDS)
    last_used = _recipients_last_used(agent, since=now - window)
    new = {address.lower() for address in recipients}
    distinct = len(last_used.keys() | new)
    if distinct <= limit:
        return None
    # Addresses this message does not name free their share when their last use leaves the window; the
    # `excess` ones used longest ago must go before this message fits.
    excess = distinct - limit
    freeable = sorted(used_at for address, used_at in last_used.items() if address not in new)
    if excess > len(freeable):
        return QuotaExceeded(
            f"This message has {len(new)} distinct recipients, more than this agent's daily limit of "
            f"{limit}: waiting will not help.",
            quota="daily_recipients",
            limit=limit,
            window_seconds=DAILY_WINDOW_SECONDS,
            retry_after_seconds=None,
        )
    return QuotaExceeded(
        f"This agent may write to {limit} distinct addresses per 24 hours; this message would make "
        f"{distinct}.",
        quota="daily_recipients",
        limit=limit,
        window_seconds=DAILY_WINDOW_SECONDS,
        retry_after_seconds=_seconds_until(freeable[excess - 1] + window, now),
    )


def _recipients_last_used(agent: Agent, *, since: datetime) -> dict[str, datetime]:
    """Each address (lowercased) the agent's counted sends since `since` went to (to and cc), and when it
    was last written to."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT lower(recipient ->> 'address'), max(message.received_at)
            FROM {Message._meta.db_table} AS message
            CROSS JOIN LATERAL jsonb_array_elements(message."to" || message.cc) AS recipient
            WHERE message.agent_id = %s AND message.direction = %s AND message.status <> %s
              AND message.received_at > %s
            GROUP BY 1
            """,
            [agent.pk, Direction.OUTBOUND.value, MessageStatus.DISCARDED.value, since],
        )
        return {address: used_at for address, used_at in cursor.fetchall() if address}


def _window_name(seconds: int) -> str:
    if seconds == DAILY_WINDOW_SECONDS:
        return "24 hours"
    return f"{seconds} seconds"
