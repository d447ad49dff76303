"""Decisions on fresh upstream data: a request may say how old the calendars' upstream copies may be.

The engine does not know about upstream links (sync builds on bookings, not the other way round), so a
request that sets `max_upstream_staleness_seconds` asks through this signal; the sync app answers by
syncing each stale link first, and raises `UpstreamStale` (503) if it still cannot.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.dispatch import Signal

from bookings.models import Calendar

# Sent with `calendar_ids` and `max_staleness_seconds`; a receiver returns once every linked calendar
# among them synced that recently, or raises.
upstream_freshness_needed = Signal()


def require_fresh(calendars: Iterable[Calendar], max_staleness_seconds: int | None) -> None:
    """Return once the calendars' upstream copies are at most `max_staleness_seconds` old (None: any
    age will do), or raise UpstreamStale."""
    if max_staleness_seconds is None:
        return
    upstream_freshness_needed.send(
        sender=Calendar,
        calendar_ids=sorted({c.pk for c in calendars}),
        max_staleness_seconds=max_staleness_seconds,
    )
