"""The one query behind GET /v1/audit and the dashboard's audit browser, and a reservation's trail."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.db.models.functions import Now

from audit.models import AuditRecord
from workspaces.models import Workspace


def audit_records(
    *,
    workspace: Workspace,
    event_type: str | None = None,
    agent: str | None = None,
    calendar: str | None = None,
    outcome: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    overlaps_start: datetime | None = None,
    overlaps_end: datetime | None = None,
) -> QuerySet[AuditRecord]:
    # Retention is enforced here, on read: rows past the tier's window never come back, whether or
    # not the purge has deleted them yet.
    records = AuditRecord.objects.filter(
        workspace_id=workspace.pk, timestamp__gte=Now() - timedelta(days=workspace.audit_retention_days)
    )
    if event_type:
        # `calendar.hold.*` selects a family of events.
        if event_type.endswith(".*"):
            records = records.filter(event_type__startswith=event_type[:-1])
        else:
            records = records.filter(event_type=event_type)
    if agent is not None:
        records = records.filter(agent_public_id=agent)
    if calendar is not None:
        records = records.filter(calendar_public_id=calendar)
    if outcome is not None:
        records = records.filter(outcome=outcome)
    if since is not None:
        records = records.filter(timestamp__gte=since)
    if until is not None:
        records = records.filter(timestamp__lt=until)
    if overlaps_start is not None:
        records = records.filter(requested_end__gt=overlaps_start)
    if overlaps_end is not None:
        records = records.filter(requested_start__lt=overlaps_end)
    return records


def reservation_trail(
    *, workspace: Workspace, public_ids: list[str], since: datetime, limit: int
) -> list[AuditRecord]:
    """The `limit` most recent audit rows about the reservations `public_ids` since `since`, oldest first."""
    records = list(
        audit_records(workspace=workspace, since=since)
        .filter(reservation_public_id__in=public_ids)
        .order_by("-timestamp", "-id")[:limit]
    )
    records.reverse()
    return records
