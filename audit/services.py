"""The one way audit rows are written. Call it inside the transaction of the change it records."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from agentcal.db import InsertBatch, unsaved
from agentcal.ids import new_public_id
from agentcal.metrics import record_audit_event
from audit.events import AuditEvent
from audit.models import AuditRecord, Outcome
from workspaces.actor import Actor


def audit_record(
    *,
    event_type: AuditEvent | str,
    outcome: Outcome,
    actor: Actor | None,
    batch: InsertBatch | None = None,
    workspace_id: int | None = None,
    calendar_public_id: str = "",
    reservation_public_id: str = "",
    requested_start: datetime | None = None,
    requested_end: datetime | None = None,
    http_status: int | None = None,
    failure_reason: str = "",
    conflict_details: dict[str, Any] | None = None,
    fencing_token: int | None = None,
    details: dict[str, Any] | None = None,
    key_prefix: str = "",
    request_id: str = "",
) -> AuditRecord:
    """Write one audit row now, or with `batch` queue it to go with the transaction's other INSERTs
    (the engine's writes: one round trip for reservation, audit and outbox rows)."""
    values: dict[str, Any] = {
        "public_id": new_public_id("aud"),
        "event_type": str(event_type),
        "outcome": str(outcome),
        "workspace_id": actor.workspace.pk if actor else workspace_id,
        "agent_public_id": actor.agent_public_id if actor else "",
        "actor_user": actor.user_email if actor else "",
        "auth_key_prefix": (actor.key_prefix if actor else "") or key_prefix,
        "calendar_public_id": calendar_public_id,
        "reservation_public_id": reservation_public_id,
        "requested_start": requested_start,
        "requested_end": requested_end,
        "http_status": http_status,
        "failure_reason": failure_reason,
        "conflict_details": conflict_details,
        "fencing_token": fencing_token,
        "request_id": (actor.request_id if actor else "") or request_id,
        "details": details or {},
    }
    if batch is not None:
        batch.add(AuditRecord, values)  # `timestamp` comes from the column's default, now()
        record = unsaved(AuditRecord, **values)  # the row is written when the batch is
    else:
        record = AuditRecord.objects.create(**values)
    # Counted once the audited change commits (immediately outside a transaction).
    transaction.on_commit(
        functools.partial(
            record_audit_event,
            event_type=values["event_type"],
            outcome=values["outcome"],
            failure_reason=failure_reason,
            agent=values["agent_public_id"],
            calendar=calendar_public_id,
        )
    )
    return record


# Rows with no workspace (e.g. a refused request with an unknown key); must match migration 0003.
ORPHAN_RETENTION_DAYS = 90


@transaction.atomic(durable=True)
def audit_purge_expired() -> int:
    """Delete rows past their workspace's retention window (the only DELETE the trigger allows)."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL agentcal.audit_purge = 'on'")
        cursor.execute(
            """
            DELETE FROM audit_auditrecord a
             WHERE a.timestamp < now() - make_interval(days => COALESCE(
                     (SELECT w.audit_retention_days FROM workspaces_workspace w WHERE w.id = a.workspace_id),
                     %s))
            """,
            [ORPHAN_RETENTION_DAYS],
        )
        return cursor.rowcount
