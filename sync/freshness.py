"""Bringing links up to date before a decision that asked for fresh upstream data.

A stale link is synced in the request (one delta sync, the same run the schedule makes). Its lease
lets one run at a time, and is taken only if no run synced the link since the oldest time the request
accepts: a request that finds the link being synced (or synced since it looked) waits for that run
instead of starting its own, so concurrent requests share one sync. A link that is still stale by the
deadline — the upstream server down, a sync that failed — refuses the request with `503 upstream_stale`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from agentcal.clock import isoformat_z, server_now
from agentcal.errors import UpstreamStale
from agentcal.metrics import FRESHNESS_SYNCS
from sync.models import Connection, ConnectionStatus
from sync.services import connection_sync

_POLL_SECONDS = 0.05


def ensure_fresh(sender: Any, *, calendar_ids: Sequence[int], max_staleness_seconds: int, **_: Any) -> None:
    """The receiver of bookings.freshness.upstream_freshness_needed."""
    links = list(
        Connection.objects.filter(calendar_id__in=calendar_ids)
        .exclude(status=ConnectionStatus.REVOKED)
        .select_related("calendar")
    )
    if not links:
        return
    oldest_accepted = server_now() - timedelta(seconds=max_staleness_seconds)
    stale = [link for link in links if _older(link.last_synced_at, oldest_accepted)]
    deadline = time.monotonic() + settings.SYNC_FRESHNESS_SECONDS
    for link in stale:
        if connection_sync(link.pk, unless_synced_since=oldest_accepted).outcome == "busy":
            FRESHNESS_SYNCS.labels("shared").inc()
            _wait_for_the_run(link.pk, deadline)
        else:
            FRESHNESS_SYNCS.labels("ran").inc()
    still = [
        (link.calendar.public_id, synced_at)
        for link in stale
        if _older(synced_at := _last_synced(link.pk), oldest_accepted)
    ]
    if still:
        raise UpstreamStale(
            f"The upstream calendar of {', '.join(pid for pid, _ in still)} could not be synced within the "
            f"{max_staleness_seconds} seconds the request accepts.",
            calendars=[
                {"calendar": pid, "last_synced_at": isoformat_z(at) if at else None} for pid, at in still
            ],
            retry_after_seconds=settings.SYNC_FRESHNESS_RETRY_AFTER_SECONDS,
        )


def _wait_for_the_run(connection_id: int, deadline: float) -> None:
    """Until another run's lease on the link ends (it synced, or failed), or the deadline."""
    while time.monotonic() < deadline:
        if not Connection.objects.filter(pk=connection_id, lease_until__gt=server_now()).exists():
            return
        time.sleep(_POLL_SECONDS)


def _last_synced(connection_id: int) -> datetime | None:
    return Connection.objects.filter(pk=connection_id).values_list("last_synced_at", flat=True).first()


def _older(synced_at: datetime | None, oldest_accepted: datetime) -> bool:
    return synced_at is None or synced_at < oldest_accepted
