"""The one query behind GET /v1/audit and the dashboard's audit browser, and what people's pages count and
show of the trail: a reservation's history, conflicts per agent, activity over time."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, QuerySet
from django.db.models.functions import Now

from agentcal.event_patterns import matching
from audit.models import AuditRecord, Outcome
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
        records = records.filter(matching(event_type))  # `calendar.hold.*`: a family of events
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


def rejections_by_agent(
    *, workspace: Workspace, event_types: Iterable[str], agent_public_ids: Iterable[str]
) -> dict[str, int]:
    """How many of `event_types` each agent had refused, as far back as the audit trail is kept."""
    rejected = (
        AuditRecord.objects.filter(
            workspace_id=workspace.pk,
            timestamp__gte=Now() - timedelta(days=workspace.audit_retention_days),
            event_type__in=event_types,
            outcome=Outcome.REJECTED,
            agent_public_id__in=agent_public_ids,
        )
        .values("agent_public_id")
        .annotate(n=Count("id"))
    )
    return {row["agent_public_id"]: row["n"] for row in rejected}


# What the dashboard's metrics page charts, each a condition on audit rows, in the page's order.
ACTIVITY_SERIES = {
    "holds": "event_type = 'calendar.hold.created'",
    "commits": "event_type = 'calendar.commit.created'",
    "conflicts": "failure_reason = 'slot_conflict'",
    "preemptions": "event_type IN ('calendar.hold.evicted', 'calendar.booking.bumped')",
    "expiries": "event_type = 'calendar.hold.expired'",
}


@dataclass
class Activity:
    series: dict[str, list[int]]  # per ACTIVITY_SERIES name: counts per bucket, oldest first
    from_hold: int  # commits of a hold, in the whole window


def activity_by_bucket(*, workspace: Workspace, length: timedelta, bucket: timedelta) -> Activity:
    """The ACTIVITY_SERIES counted in buckets of `bucket` over the last `length` (the database's clock)."""
    buckets = int(length / bucket)
    columns = ",\n".join(
        f"count(*) FILTER (WHERE {condition}) AS s{i}" for i, condition in enumerate(ACTIVITY_SERIES.values())
    )
    with connection.cursor() as cursor:
        # One pass over the window's rows, grouped into buckets counted back from now (database clock;
        # statement_timestamp, as Django's Now() that stamps audit rows).
        cursor.execute(
            f"""
            SELECT floor(EXTRACT(EPOCH FROM statement_timestamp() - timestamp) / %s)::int AS ago, {columns},
                   count(*) FILTER (WHERE event_type = 'calendar.commit.created'
                                      AND details ->> 'from_hold' = 'true') AS from_hold
              FROM audit_auditrecord
             WHERE workspace_id = %s AND timestamp > statement_timestamp() - %s::interval
             GROUP BY ago
            """,  # noqa: S608 — the interpolated parts are the constant ACTIVITY_SERIES conditions above
            [bucket.total_seconds(), workspace.pk, f"{int(length.total_seconds())} seconds"],
        )
        rows = cursor.fetchall()
    counts = [[0] * buckets for _ in ACTIVITY_SERIES]
    from_hold = 0
    for ago, *values in rows:
        from_hold += values[-1]
        if 0 <= ago < buckets:
            for i, value in enumerate(values[:-1]):
                counts[i][buckets - 1 - ago] = value  # oldest first
    return Activity(series=dict(zip(ACTIVITY_SERIES, counts, strict=True)), from_hold=from_hold)


def audit_record_in(workspace: Workspace, public_id: str) -> AuditRecord | None:
    """One audit row of the workspace, within its retention window."""
    return audit_records(workspace=workspace).filter(public_id=public_id).first()


def audit_batch(
    records: QuerySet[AuditRecord], *, after: int | None, descending: bool, size: int
) -> list[AuditRecord]:
    """The next `size` of `records` past the row `after` (a keyset batch: no long-lived cursor, the same
    plan for the first batch and the last)."""
    if after is not None:
        records = records.filter(pk__lt=after) if descending else records.filter(pk__gt=after)
    return list(records.order_by("-pk" if descending else "pk")[:size])
