"""Does a write get slower as a calendar's history grows? (in-process, one thread, no contention)

For each size, a fresh calendar gets that many committed bookings *before* the spans to be held
(bulk-inserted through the ORM, not through the engine: they only need to exist), then one agent
places holds on free slots after them. The engine's overlap look-ups are bounded below by the longest
possible reservation (`start_time > start - 7 days`), so the (calendar, start_time) index reads a
window, not the history; EXPLAIN ANALYZE of that look-up shows how many rows it reads and discards.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from bench.clients import EngineSession
from bench.progress import Progress
from bench.stats import latency_summary
from bench.targets import LocalTarget
from bookings.models import MAX_RESERVATION_LENGTH, Calendar, Reservation, ReservationStatus
from bookings.spans import Span

SLOT = timedelta(minutes=5)
BATCH = 2_000

# The look-up the engine makes (pre-check, bookings in the way), as plain SQL for EXPLAIN.
_OVERLAP_SQL = """
    SELECT id FROM bookings_reservation
     WHERE calendar_id = %s AND status IN ('held', 'committed')
       AND start_time < %s AND start_time > %s AND end_time > %s
"""


def history_probe(
    target: LocalTarget, *, sizes: Sequence[int], base: datetime, holds: int, progress: Progress
) -> list[dict[str, Any]]:
    session = EngineSession(agent_pk=target.agent_pks[0])
    rows_out = []
    try:
        for size in sizes:
            public_id = target.calendar_create(f"bench history {size}", slot_minutes=5)
            calendar = Calendar.objects.get(public_id=public_id)
            _fill(calendar, target.agent_pks[0], size, base)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE bookings_reservation")
            samples = []
            with progress.phase(f"history · {size:,} earlier bookings", total=holds, unit="holds") as bar:
                for i in range(holds):
                    start = base + SLOT * (size + 10 + i)
                    held = session.hold(public_id, Span(start, start + SLOT))
                    if not held.ok:
                        raise RuntimeError(f"history probe: a hold on a free slot failed: {held}")
                    samples.append(held.seconds)
                    bar.tick()
                    bar.advance()
            probe_start = base + SLOT * (size + 10 + holds)
            rows_out.append(
                {
                    "earlier_bookings": size,
                    "hold_latency_ms": latency_summary(samples),
                    "overlap_lookup": _explain(calendar.pk, Span(probe_start, probe_start + SLOT)),
                }
            )
    finally:
        session.close()
    return rows_out


def _fill(calendar: Calendar, agent_pk: int, size: int, base: datetime) -> None:
    for first in range(0, size, BATCH):
        rows = []
        for k in range(first, min(first + BATCH, size)):
            start = base + SLOT * k
            rows.append(
                Reservation(
                    hold_id=f"hld_hist{calendar.pk}x{k}",
                    booking_id=f"bk_hist{calendar.pk}x{k}",
                    calendar=calendar,
                    agent_id=agent_pk,
                    status=ReservationStatus.COMMITTED,
                    priority=100,
                    start_time=start,
                    end_time=start + SLOT,
                    fencing_token=k + 1,
                    committed_at=base,
                    bump_window_ends_at=base,
                )
            )
        Reservation.objects.bulk_create(rows)


def _explain(calendar_id: int, span: Span) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + _OVERLAP_SQL,
            [calendar_id, span.end, span.start - MAX_RESERVATION_LENGTH, span.start],
        )
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    node = plan["Plan"]
    while "Plans" in node and node.get("Node Type") not in ("Index Scan", "Bitmap Heap Scan", "Seq Scan"):
        node = node["Plans"][0]
    return {
        "execution_ms": plan.get("Execution Time"),
        "node": f"{node.get('Node Type')} {node.get('Index Name', '')}".strip(),
        "rows_removed_by_filter": node.get("Rows Removed by Filter", 0),
    }
