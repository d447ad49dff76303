"""The availability search in-process on a big case: 10 calendars × 30 days × 1,000 busy blocks each.

`find_common_time` is what `POST /v1/availability/search` and find-and-hold call; here it is timed
without HTTP, so the figure is the search's own work (two statements, then Python).
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

from django.db import transaction

from bench.meeting_week import first_monday_after
from bench.progress import Progress
from bench.stats import Outcome, ScenarioResult, latency_summary
from bench.targets import LocalTarget
from bookings import engine
from bookings.models import BusyBlock, UpstreamSource
from bookings.search import SearchQuery, SearchResult, find_common_time, rank, read_calendars
from bookings.spans import Span

SEARCH_SCENARIO = "meeting-search"
# Zones with some working time in common (Europe and the Americas' east), each 08:00–18:00 on weekdays.
ZONES = (
    "Europe/London",
    "Europe/Berlin",
    "Europe/Paris",
    "Europe/Madrid",
    "Europe/Dublin",
    "Europe/Lisbon",
    "America/New_York",
    "America/Toronto",
    "America/Sao_Paulo",
    "Africa/Lagos",
)
_HOURS = {day: [["08:00", "18:00"]] for day in ("mon", "tue", "wed", "thu", "fri")} | {"sat": [], "sun": []}
BLOCK_MINUTES = (10, 15, 20)  # ~35 % of every day busy at 1,000 blocks a month


def search_probe(
    target: LocalTarget,
    *,
    calls: int,
    seed: int,
    progress: Progress,
    calendars: int = 10,
    days: int = 30,
    blocks: int = 1_000,
) -> ScenarioResult:
    """`calls` searches for the earliest 10 half-hour meetings of all the calendars over `days` days
    (one untimed call first), each calendar carrying `blocks` upstream busy blocks at random."""
    rng = random.Random(seed)
    start = first_monday_after(datetime.now(UTC))
    window = Span(start, start + timedelta(days=days))
    public_ids = []
    for number in range(calendars):
        calendar = engine.calendar_create(
            actor=target.actor,
            name=f"bench search {number}",
            timezone=ZONES[number % len(ZONES)],
            working_hours=_HOURS,
        )
        public_ids.append(calendar.public_id)
        rows = []
        for block in range(blocks):
            begins = start + timedelta(minutes=15 * rng.randrange(days * 24 * 4))
            rows.append(
                BusyBlock(
                    calendar=calendar,
                    source=UpstreamSource.CALDAV,
                    connection_id=0,
                    event_key=f"probe-{number}-{block}",
                    start_time=begins,
                    end_time=begins + timedelta(minutes=rng.choice(BLOCK_MINUTES)),
                )
            )
        BusyBlock.objects.bulk_create(rows)

    query = SearchQuery(required=public_ids, duration=timedelta(minutes=30), window=window, limit=10)

    def search() -> SearchResult:
        return find_common_time(workspace_id=target.actor.workspace.pk, query=query)

    found = search()  # untimed: the first call pays for plans and imports
    outcomes = []
    began = time.perf_counter()
    with progress.phase("meeting-search · find_common_time · in-process", total=calls, unit="calls") as bar:
        for _ in range(calls):
            started = time.perf_counter()
            search()
            outcomes.append(Outcome("search", 200, time.perf_counter() - started))
            bar.advance()
    # Where a search's time goes: the snapshot read (two statements, the rows decoded) and the ranking.
    reads, ranks = [], []
    for _ in range(min(calls, 10)):
        started = time.perf_counter()
        with transaction.atomic():
            snapshot = read_calendars(target.actor.workspace.pk, public_ids, window)
        read = time.perf_counter()
        rank(snapshot, query)
        reads.append(read - started)
        ranks.append(time.perf_counter() - read)
    result = ScenarioResult(
        SEARCH_SCENARIO, "search", "in-process", outcomes, time.perf_counter() - began, double_bookings=None
    )
    result.extra = {
        "calendars": calendars,
        "days": days,
        "busy_blocks_per_calendar": blocks,
        "candidates": len(found.candidates),
        "truncated": found.truncated,
        "read_ms": latency_summary(reads),
        "rank_ms": latency_summary(ranks),
    }
    return result
