"""Prometheus metrics, exposed at GET /metrics.

Counts come from the one place every state change and refusal already passes — audit_record() — and
are incremented only once the audited transaction commits (a rolled-back change counts nothing).
Gauges that describe stored state (outbox lag, conversion over the last hour) are read from the
database at scrape time, so they are right whichever process serves the scrape.

Under `agentcal run` several processes (gunicorn workers, Celery) record metrics: PROMETHEUS_MULTIPROC_DIR
is set and the scrape aggregates their files (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# Write transactions are short; buckets from 1 ms to 5 s.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

AUDITED_EVENTS = Counter(
    "agentcal_events_total",
    "Audited state changes and refusals (holds, commits, evictions, bumps, expiries, ...).",
    ["event_type", "outcome", "reason"],
)
CONFLICTS = Counter(
    "agentcal_conflicts_total", "409 slot_conflict refusals by agent and calendar.", ["agent", "calendar"]
)
# The agents' guardrails (README, "Limits"): each refusal by agent and limit, and each request let
# through unchecked because Redis did not answer.
LIMIT_REFUSALS = Counter(
    "agentcal_limit_refusals_total",
    "Requests refused by an agent's limits (rate, in flight, budgets, pause), by agent and limit.",
    ["agent", "limit"],
)
RATE_LIMIT_FAILED_OPEN = Counter(
    "agentcal_rate_limit_failed_open_total",
    "Requests let through without a rate check because Redis did not answer.",
)
PREEMPTIONS = Counter("agentcal_preemptions_total", "Holds evicted and commits bumped.", ["kind"])
HOLD_EXPIRIES = Counter(
    "agentcal_hold_expiries_total", "Holds expired, lazily by a write or by the sweep.", ["how"]
)
WRITE_SECONDS = Histogram(
    "agentcal_write_seconds", "Engine write operations, end to end.", ["operation"], buckets=_LATENCY_BUCKETS
)
SEARCH_SECONDS = Histogram(
    "agentcal_availability_search_seconds",
    "Searches for a common time (availability/search, and find-and-hold's search before its lock).",
    ["kind"],
    buckets=_LATENCY_BUCKETS,
)
# A candidate the search found free but another write took before find-and-hold had the locks.
CANDIDATES_TAKEN = Counter(
    "agentcal_find_and_hold_candidates_taken_total",
    "Find-and-hold candidates skipped because they were taken between the search and the lock.",
)
# Requests with max_upstream_staleness_seconds that found a link stale: synced it themselves ("ran") or
# waited for a run already under way ("shared").
FRESHNESS_SYNCS = Counter(
    "agentcal_upstream_freshness_syncs_total",
    "Stale upstream links synced before a decision, by whether the request ran or shared the sync.",
    ["how"],
)
IDEMPOTENT_REPLAYS = Counter(
    "agentcal_idempotent_replays_total", "Responses replayed for a repeated Idempotency-Key."
)
WEBHOOK_SECONDS = Histogram(
    "agentcal_webhook_delivery_seconds",
    "Webhook delivery attempts (HTTP round trip).",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0),
)
WEBHOOK_FAILURES = Counter(
    "agentcal_webhook_delivery_failures_total", "Failed delivery attempts.", ["reason"]
)
# Inbound-webhook requests refused without an audit row (the rest are audited), before their signature
# was checked: over their peer's request rate, or past its budget of audited refusals.
AUTH_UNAUDITED = Counter(
    "agentcal_auth_unaudited_refusals_total",
    "Agent API requests refused before a key was proved, past the peer's audit budget (by error code).",
    ["reason"],
)
KEY_VERIFICATIONS_SPARED = Counter(
    "agentcal_api_key_verifications_spared_total",
    "Wrong secrets answered without argon2: refused_before (a secret already refused) or over_budget.",
    ["reason"],
)
INBOUND_WEBHOOK_UNAUDITED = Counter(
    "agentcal_inbound_webhook_unaudited_refusals_total",
    "Inbound-webhook requests refused without an audit row (rate_limited, over_audit_budget).",
    ["reason"],
)
# SMTP sessions the inbound listener ended itself: refused at the greeting over its session limits, or
# closed for idling or for lasting too long (no audit row: a flood must not fill the audit log).
INBOUND_SMTP_SESSIONS_CLOSED = Counter(
    "agentcal_inbound_smtp_sessions_closed_total",
    "SMTP sessions the inbound listener closed itself (over_sessions, over_sessions_per_ip, idle, too_long).",
    ["reason"],
)
# Push notifications (sync/push/endpoints.py) refused without an audit row, by provider: over their peer's
# request rate, or past its budget of audited refusals (the rest are audited as sync.push.rejected).
PUSH_UNAUDITED = Counter(
    "agentcal_push_unaudited_refusals_total",
    "Push notifications refused without an audit row (rate_limited, over_audit_budget).",
    ["provider", "reason"],
)

# From the upstream change (its LAST-MODIFIED, or a push's arrival) to its busy block being enforced.
SYNC_LAG_SECONDS = Histogram(
    "agentcal_sync_lag_seconds",
    "Upstream calendar changes: from the change to the busy block being enforced.",
    ["provider"],
    buckets=(1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 300.0, 600.0, 1800.0),
)
SYNC_RUNS = Counter(
    "agentcal_sync_runs_total", "Upstream syncs by provider and outcome.", ["provider", "outcome"]
)


def record_audit_event(
    *, event_type: str, outcome: str, failure_reason: str, agent: str, calendar: str
) -> None:
    AUDITED_EVENTS.labels(event_type, outcome, failure_reason).inc()
    if failure_reason == "slot_conflict":
        CONFLICTS.labels(agent or "-", calendar or "-").inc()
    if event_type == "calendar.hold.evicted":
        PREEMPTIONS.labels("evicted").inc()
    elif event_type == "calendar.booking.bumped":
        PREEMPTIONS.labels("bumped").inc()


class DatabaseStateCollector(Collector):
    """Gauges read from PostgreSQL at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0), count(*)
                  FROM webhooks_outboxevent WHERE dispatched_at IS NULL
                """
            )
            lag, undispatched = cursor.fetchone()
            cursor.execute("SELECT count(*) FROM webhooks_webhookdelivery WHERE status = 'pending'")
            (pending_deliveries,) = cursor.fetchone()
            cursor.execute(
                """
                SELECT count(*) FILTER (WHERE event_type = 'calendar.hold.created'),
                       count(*) FILTER (WHERE event_type = 'calendar.commit.created'
                                          AND details ->> 'from_hold' = 'true')
                  FROM audit_auditrecord WHERE timestamp > now() - interval '1 hour'
                """
            )
            holds, commits_from_holds = cursor.fetchone()
        yield GaugeMetricFamily(
            "agentcal_outbox_lag_seconds", "Age of the oldest undispatched event.", float(lag)
        )
        yield GaugeMetricFamily(
            "agentcal_outbox_undispatched", "Events not yet turned into deliveries.", undispatched
        )
        yield GaugeMetricFamily(
            "agentcal_webhook_deliveries_pending", "Deliveries awaiting an attempt.", pending_deliveries
        )
        yield GaugeMetricFamily(
            "agentcal_hold_to_commit_conversion_ratio",
            "Commits from holds / holds created, over the last hour.",
            (commits_from_holds / holds) if holds else 0.0,
        )


def render() -> bytes:
    """The scrape: this process's (or, in multiprocess mode, every process's) metrics + DB gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry: Any = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    database = CollectorRegistry()
    database.register(DatabaseStateCollector())
    return generate_latest(registry) + generate_latest(database)


# How long writes wait for a calendar's lock (or for the write in flight that holds it), as PostgreSQL
# measures it in the statement that waits (clock_timestamp() - statement_timestamp(), returned with the
# statement's own result: no extra round trip). A lock granted at once is a wait of zero. The dashboard's
# Metrics page shows its percentiles (lock_wait_percentiles below).
CALENDAR_LOCK_WAIT_SECONDS = Histogram(
    "agentcal_calendar_lock_wait_seconds",
    "Waits for a calendar's lock (or for the write holding it), measured by PostgreSQL.",
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def lock_wait_percentiles(quantiles: tuple[float, ...] = (0.5, 0.95, 0.99)) -> dict[str, Any] | None:
    """Percentiles of CALENDAR_LOCK_WAIT_SECONDS over every process since they started (in
    multiprocess mode, every gunicorn worker's file), or None before the first write."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry: Any = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    buckets: dict[float, float] = {}
    for family in registry.collect():
        if family.name != "agentcal_calendar_lock_wait_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    cumulative = sorted(buckets.items())
    if not cumulative or not cumulative[-1][1]:
        return None
    found = histogram_quantiles(cumulative, quantiles)
    return {"count": int(cumulative[-1][1]), **{f"p{round(q * 100):d}": v for q, v in found.items()}}


def histogram_quantiles(
    cumulative: list[tuple[float, float]], quantiles: tuple[float, ...]
) -> dict[float, float]:
    """Quantiles from cumulative histogram buckets ((upper bound, count), ascending, the last +Inf),
    interpolated linearly within a bucket as Prometheus' histogram_quantile() does: each is known to
    its bucket. One beyond the last finite bound is that bound (all that is known is "at least")."""
    total = cumulative[-1][1]
    result = {}
    for quantile in quantiles:
        rank = quantile * total
        lower, below = 0.0, 0.0
        value = 0.0
        for bound, count in cumulative:
            if count >= rank:
                if bound == float("inf"):
                    value = lower
                else:
                    share = (rank - below) / (count - below) if count > below else 1.0
                    value = lower + (bound - lower) * share
                break
            lower, below = bound, count
        result[quantile] = value
    return result
