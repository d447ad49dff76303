"""Find-and-hold: the best common time of several calendars, held on all of them in one locked write.

The search runs first, without a lock (bookings.search). Then, holding every required calendar's lock
(in id order, like every write), the candidates are checked in rank order against what is busy now
and the first still free is held; one taken meanwhile is skipped (counted). Only if every candidate
was taken does the search run again, under the locks, where nothing can change: its answer is then
exact, so a full window answers `409 no_slot_found`, never a double hold. A search only takes free
time: it never takes anything over. Design: docs/architecture.md, "Find and hold".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction

from agentcal.clock import isoformat_z
from agentcal.db import InsertBatch
from agentcal.errors import NoSlotFound, SlotConflict
from agentcal.metrics import CANDIDATES_TAKEN
from audit.events import AuditEvent
from bookings.engine.auditing import audit_rejections
from bookings.engine.budgets import spend_budget
from bookings.engine.calendars import calendars_for_write
from bookings.engine.expiry import clear_the_way
from bookings.engine.groups import ReservationGroup
from bookings.engine.locking import lock_calendars
from bookings.engine.new_rows import insert_group, new_group, record_creation
from bookings.engine.rules import priority_for
from bookings.freshness import require_fresh
from bookings.search import (
    Candidate,
    SearchQuery,
    SearchResult,
    Snapshot,
    find_common_time,
    read_calendars,
    required_index,
    search,
)
from bookings.spans import Span
from workspaces.actor import Actor


@dataclass
class FoundAndHeld:
    group: ReservationGroup
    candidate_rank: int  # 1: the search's best candidate; n: n - 1 better ones were taken first
    searched: Span


@audit_rejections(AuditEvent.HOLD_REJECTED)
def hold_found_time(
    *,
    actor: Actor,
    query: SearchQuery,
    priority: int | None = None,
    ttl_seconds: int | None = None,
    title: str = "",
    attendees: list[Any] | None = None,
    metadata: dict[str, Any] | None = None,
    max_upstream_staleness_seconds: int | None = None,
) -> FoundAndHeld:
    """Hold the best candidate of `query` on every required calendar, or raise NoSlotFound."""
    assert actor.agent is not None
    priority = priority_for(actor.agent, priority)
    if max_upstream_staleness_seconds is not None:
        required = calendars_for_write(workspace_id=actor.workspace.pk, public_ids=query.required)
        require_fresh(required, max_upstream_staleness_seconds)
    found = find_common_time(workspace_id=actor.workspace.pk, query=query)
    if not found.candidates:
        raise no_slot_found(found)
    batch = InsertBatch()
    with transaction.atomic(durable=True):
        now, versions = lock_calendars(sorted(found.calendars[pid].pk for pid in query.required))
        spend_budget(actor, holds=1, bookings=0)
        # Under the locks nothing on these calendars changes until this transaction ends: what is read
        # now is what the hold will meet. First only the candidates' stretch of time.
        near = Span(min(c.span.start for c in found.candidates), max(c.span.end for c in found.candidates))
        fresh = read_calendars(actor.workspace.pk, query.required, near, now=now)
        chosen, rank_won = _first_still_free(found.candidates, fresh, query, near)
        if chosen is None:
            taken = len(found.candidates)
            again = search(workspace_id=actor.workspace.pk, query=query, now=now)
            if not again.candidates:
                raise no_slot_found(again)
            chosen, rank_won = again.candidates[0], taken + 1
        if rank_won > 1:
            transaction.on_commit(lambda: CANDIDATES_TAKEN.inc(rank_won - 1))
        span = chosen.span
        ordered = [fresh.calendars[pid] for pid in query.required]
        in_the_way = clear_the_way(calendar_ids=[c.pk for c in ordered], span=span, now=now, batch=batch)
        if in_the_way.reservations or in_the_way.upstream is not None:
            # Unreachable: what is in the way was read under these very locks.
            raise SlotConflict("The span found was taken concurrently; search again.", retryable=True)
        group = new_group(
            actor=actor,
            calendars=ordered,
            versions=versions,
            span=span,
            priority=priority,
            ttl_seconds=ttl_seconds,
            commit=False,
            now=now,
            title=title,
            attendees=attendees or [],
            metadata=metadata or {},
            batch=batch,
        )
        record_creation(
            actor=actor,
            group=group,
            calendars=ordered,
            span=span,
            priority=priority,
            commit=False,
            batch=batch,
            found_by_search={
                "candidate_rank": rank_won,
                "window": [isoformat_z(query.window.start), isoformat_z(query.window.end)],
                "duration_minutes": int(query.duration / timedelta(minutes=1)),
            },
        )
        insert_group(group, batch)
    return FoundAndHeld(group=group, candidate_rank=rank_won, searched=found.searched)


def _first_still_free(
    candidates: list[Candidate], fresh: Snapshot, query: SearchQuery, window: Span
) -> tuple[Candidate | None, int]:
    """The first candidate (and its rank) free in `fresh` by every required calendar's busy time and
    rules, at the lock's clock (`window`: the candidates' stretch of time, which `fresh` covers)."""
    busy = required_index(fresh, window)
    for number, candidate in enumerate(candidates, start=1):
        if busy.is_free(candidate.span):
            return candidate, number
    return None, 0


def no_slot_found(result: SearchResult) -> NoSlotFound:
    """The 409 for a search that found nothing: its reasons and what it searched."""
    return NoSlotFound(
        "No time in the window is free and within the rules of every required calendar.",
        reasons=result.reasons or {"no_common_free_time": True},
        searched={"start": isoformat_z(result.searched.start), "end": isoformat_z(result.searched.end)},
    )
