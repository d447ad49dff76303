"""Contention and conversion at a glance, without Prometheus: counts from the workspace's audit trail,
and how the workspace's linked calendars are syncing.

Charts are server-rendered SVG (no script, no inline style) with their axes in HTML and every number in
a table below. Sync lag is each connection's latest, stored with it by every sync, not the
`agentcal_sync_lag_seconds` histogram.

Design: docs/architecture.md, "The dashboard".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.http import HttpResponse
from django.shortcuts import render

from agentcal.clock import server_now
from agentcal.metrics import lock_wait_percentiles
from audit.selectors import activity_by_bucket
from bookings.selectors import workspace_hold_counts
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from dashboard.viewmodels.conversion import CONVERSION_DEFINITION, CONVERSION_EXCLUDES, conversion_percent
from dashboard.wording import provider_name
from sync.models import Connection, ConnectionStatus
from sync.selectors import workspace_connections
from workspaces.models import Workspace

# window name -> (length, bucket size)
WINDOWS = {"hour": (timedelta(hours=1), timedelta(minutes=5)), "day": (timedelta(days=1), timedelta(hours=1))}
# How many time ticks each window's x axis has (evenly spaced bucket boundaries, "now" included).
TICKS = {"hour": 5, "day": 5}

# Each series: (label, css class, its audit.selectors.ACTIVITY_SERIES name, what one is called).
SERIES = [
    ("Holds", "s-held", "holds", ("hold", "holds")),
    ("Commits", "s-committed", "commits", ("commit", "commits")),
    ("Conflicts", "s-conflict", "conflicts", ("conflict", "conflicts")),
    ("Preemptions", "s-preempt", "preemptions", ("preemption", "preemptions")),
    ("Expiries", "s-expired", "expiries", ("expiry", "expiries")),
]
CHART_HEIGHT = 60  # SVG units; each bucket is 10 wide


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, … that is at least `value`: the top of a readable scale."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


@dataclass
class Bucket:
    """One bar's time range (UTC) and how long ago it was, for tooltips and the table."""

    start: datetime
    end: datetime
    label: str  # "10:05–10:10"


def buckets_of(now: datetime, length: timedelta, bucket: timedelta) -> list[Bucket]:
    count = int(length / bucket)
    fmt = "%H:%M" if bucket < timedelta(hours=1) else "%a %H:%M"
    spans = [(now - (count - i) * bucket, now - (count - 1 - i) * bucket) for i in range(count)]
    return [Bucket(start, end, f"{start:{fmt}}–{end:%H:%M}") for start, end in spans]


@dataclass
class Chart:
    label: str
    css: str
    counts: list[int]
    total: int
    unit: tuple[str, str] = ("event", "events")  # singular, plural
    buckets: list[Bucket] = field(default_factory=list)

    @property
    def peak(self) -> int:
        return max(self.counts) if self.counts else 0

    @property
    def scale(self) -> int:
        """The count at the top of the y axis."""
        return nice_ceiling(max(self.peak, 1))

    @property
    def y_ticks(self) -> list[int]:
        """Top to bottom, as the axis shows them: the scale, its half when that is whole, 0."""
        half = [self.scale // 2] if self.scale % 2 == 0 else []
        return [self.scale, *half, 0]

    @property
    def grid(self) -> list[dict[str, float]]:
        """Horizontal guide lines at the y ticks (SVG y grows downwards)."""
        height = CHART_HEIGHT - 1
        return [{"y": round(CHART_HEIGHT - height * tick / self.scale, 2)} for tick in self.y_ticks]

    def describe(self, count: int) -> str:
        return f"{count} {self.unit[0] if count == 1 else self.unit[1]}"

    @property
    def bars(self) -> list[dict[str, object]]:
        """SVG geometry in a 10-units-per-bucket by CHART_HEIGHT box, and each bucket's tooltip. Every
        bucket gets a full-height hover target, so empty ones say "0" too."""
        height = CHART_HEIGHT - 1
        out: list[dict[str, object]] = []
        for i, count in enumerate(self.counts):
            bar = round(height * count / self.scale, 2)
            span = self.buckets[i].label + " UTC" if i < len(self.buckets) else ""
            out.append(
                {
                    "x": i * 10,
                    "height": bar,
                    "y": round(CHART_HEIGHT - bar, 2),
                    "count": count,
                    "title": f"{self.describe(count)}, {span}" if span else self.describe(count),
                }
            )
        return out

    @property
    def width(self) -> int:
        return len(self.counts) * 10

    @property
    def summary(self) -> str:
        """The chart in one sentence, for screen readers (the table below has every number)."""
        if not self.total:
            return f"{self.label}: none in this window."
        busiest = max(range(len(self.counts)), key=lambda i: self.counts[i])
        when = (
            f", the most ({self.counts[busiest]}) at {self.buckets[busiest].label} UTC"
            if self.buckets
            else ""
        )
        return f"{self.label}: {self.describe(self.total)} in this window{when}."


def _series(workspace: Workspace, length: timedelta, bucket: timedelta) -> tuple[list[str], list[Chart], int]:
    buckets = int(length / bucket)
    activity = activity_by_bucket(workspace=workspace, length=length, bucket=bucket)
    charts = [
        Chart(label, css, activity.series[name], sum(activity.series[name]), unit)
        for label, css, name, unit in SERIES
    ]
    step = "5 min" if bucket < timedelta(hours=1) else "1 h"
    labels = [f"-{(buckets - i) * int(bucket.total_seconds() // 60)}m" for i in range(buckets)]
    return [step, *labels], charts, activity.from_hold


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
    return SyncSummary(workspace_connections(workspace))


@workspace_page()
def metrics(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    window = request.GET.get("window", "hour")
    if window not in WINDOWS:
        window = "hour"
    length, bucket = WINDOWS[window]
    (step, *_), charts, _from_hold = _series(workspace, length, bucket)
    buckets = buckets_of(server_now(), length, bucket)
    for chart in charts:
        chart.buckets = buckets
    ticks = TICKS[window]
    per_tick = (length / (ticks - 1)).total_seconds()
    x_ticks = [
        "now" if n == ticks - 1 else _ago(timedelta(seconds=per_tick * (ticks - 1 - n))) for n in range(ticks)
    ]
    holds = charts[0].total
    attempts = holds + charts[2].total
    context = page_context(
        request,
        "metrics",
        window=window,
        step=step,
        charts=charts,
        x_ticks=x_ticks,
        table_rows=[
            {"bucket": b, "counts": [chart.counts[i] for chart in charts]} for i, b in enumerate(buckets)
        ],
        conversion=conversion_percent(**workspace_hold_counts(workspace, placed_within=length)),
        conversion_definition=CONVERSION_DEFINITION,
        conversion_excludes=CONVERSION_EXCLUDES,
        conflict_rate=(charts[2].total / attempts) if attempts else None,
        has_data=any(chart.total for chart in charts),
        sync=sync_summary(workspace),
        # The whole installation's, from Prometheus' histogram (not per workspace: a label per
        # workspace would multiply its series), since the server's processes started.
        lock_wait=_lock_wait(),
    )
    return render(request, "dashboard/metrics/metrics.html", context)


def _ago(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"−{minutes} min" if minutes < 120 else f"−{minutes // 60} h"


def _lock_wait() -> dict[str, str | int] | None:
    """The calendar-lock wait percentiles as the page shows them (ms below a second)."""
    found = lock_wait_percentiles()
    if found is None:
        return None

    def shown(seconds: float) -> str:
        return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"

    return {"count": found["count"], **{name: shown(found[name]) for name in ("p50", "p95", "p99")}}
