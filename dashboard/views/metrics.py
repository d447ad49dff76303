"""Contention and conversion at a glance, without Prometheus: counts from the workspace's audit trail,
and how the workspace's linked calendars are syncing.

Sync lag is each connection's latest (stored with it by every sync), not percentiles of the
`agentcal_sync_lag_seconds` histogram: that histogram is labelled by provider only, so on a
workspace's page it would mix in every other workspace's syncs, and it lives in the processes that
sync (Celery workers), not in the one serving this page. Prometheus has it for the whole service.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.http import HttpResponse
from django.shortcuts import render

from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from dashboard.views.connections import provider_name
from sync.models import Connection, ConnectionStatus
from workspaces.models import Workspace

# window name -> (length, bucket size)
WINDOWS = {"hour": (timedelta(hours=1), timedelta(minutes=5)), "day": (timedelta(days=1), timedelta(hours=1))}

# Each series: (label, css class, SQL condition on audit rows).
SERIES = [
    ("Holds", "s-held", "event_type = 'calendar.hold.created'"),
    ("Commits", "s-committed", "event_type = 'calendar.commit.created'"),
    ("Conflicts", "s-conflict", "failure_reason = 'slot_conflict'"),
    ("Preemptions", "s-preempt", "event_type IN ('calendar.hold.evicted', 'calendar.booking.bumped')"),
    ("Expiries", "s-expired", "event_type = 'calendar.hold.expired'"),
]


@dataclass
class Chart:
    label: str
    css: str
    counts: list[int]
    total: int

    @property
    def peak(self) -> int:
        return max(self.counts) if self.counts else 0

    @property
    def bars(self) -> list[dict[str, float]]:
        """SVG geometry in a 10-units-per-bucket by 60-unit-high box, for the template."""
        peak = self.peak or 1
        return [
            {
                "x": i * 10 + 1,
                "height": round(58 * count / peak, 2),
                "y": round(60 - 58 * count / peak, 2),
                "count": count,
            }
            for i, count in enumerate(self.counts)
            if count
        ]

    @property
    def width(self) -> int:
        return len(self.counts) * 10


def _series(workspace: Workspace, length: timedelta, bucket: timedelta) -> tuple[list[str], list[Chart], int]:
    buckets = int(length / bucket)
    columns = ",\n".join(
        f"count(*) FILTER (WHERE {condition}) AS s{i}" for i, (_, _, condition) in enumerate(SERIES)
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
            """,  # noqa: S608 — the interpolated parts are the constant SERIES conditions above
            [bucket.total_seconds(), workspace.pk, f"{int(length.total_seconds())} seconds"],
        )
        rows = cursor.fetchall()
    counts = [[0] * buckets for _ in SERIES]
    from_hold = 0
    for ago, *values in rows:
        from_hold += values[-1]
        if 0 <= ago < buckets:
            for i, value in enumerate(values[:-1]):
                counts[i][buckets - 1 - ago] = value  # oldest first
    charts = [
        Chart(label, css, series, sum(series)) for (label, css, _), series in zip(SERIES, counts, strict=True)
    ]
    step = "5 min" if bucket < timedelta(hours=1) else "1 h"
    labels = [f"-{(buckets - i) * int(bucket.total_seconds() // 60)}m" for i in range(buckets)]
    return [step, *labels], charts, from_hold


@dataclass
class SyncSummary:
    connections: list[Connection]

    @property
    def rows(self) -> list[dict[str, object]]:
        return [{"connection": c, "provider": provider_name(c.provider)} for c in self.connections]

    @property
    def max_lag(self) -> float | None:
        lags = [c.sync_lag_seconds for c in self.connections if c.sync_lag_seconds is not None]
        return max(lags) if lags else None

    def count(self, status: str) -> int:
        return sum(1 for c in self.connections if c.status == status)

    @property
    def active(self) -> int:
        return self.count(ConnectionStatus.ACTIVE)

    @property
    def failing(self) -> int:
        return self.count(ConnectionStatus.FAILING)

    @property
    def pending(self) -> int:
        return self.count(ConnectionStatus.PENDING)


def sync_summary(workspace: Workspace) -> SyncSummary:
    connections = Connection.objects.filter(workspace=workspace).select_related("calendar")
    return SyncSummary(list(connections.order_by("calendar__name", "id")))


@workspace_page()
def metrics(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    window = request.GET.get("window", "hour")
    if window not in WINDOWS:
        window = "hour"
    length, bucket = WINDOWS[window]
    (step, *_), charts, from_hold = _series(workspace, length, bucket)
    holds = charts[0].total
    attempts = holds + charts[2].total
    context = page_context(
        request,
        "metrics",
        window=window,
        step=step,
        charts=charts,
        conversion=(from_hold / holds) if holds else None,
        conflict_rate=(charts[2].total / attempts) if attempts else None,
        has_data=any(chart.total for chart in charts),
        sync=sync_summary(workspace),
    )
    return render(request, "dashboard/metrics/metrics.html", context)
