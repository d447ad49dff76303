"""What the benchmark runs against: this process's database (the default), or a server at --url.

`LocalTarget` creates its own workspace, agents and API keys in the configured database (the embedded
PostgreSQL under `python3 dev.py bench` without DATABASE_URL); its engine scenarios can run
in-process and through a gunicorn the benchmark starts, and its double-booking check is SQL.
`RemoteTarget` only has HTTP and the keys it was given; it checks for double bookings through the API
(the busy list of `availability`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from django.db import connection

from agentcal.clock import isoformat_z
from bench.clients import EngineSession, http_client
from bookings import engine
from bookings.models import Calendar
from bookings.selectors import MAX_AVAILABILITY_WINDOW
from bookings.spans import Span
from workspaces.actor import Actor
from workspaces.limits import LIMIT_NAMES, Limits
from workspaces.models import Agent, Scope
from workspaces.services import agent_key_bootstrap

BENCH_SCOPES = [Scope.CALENDARS_READ, Scope.CALENDARS_WRITE, Scope.BOOKINGS_READ, Scope.BOOKINGS_WRITE]
AGENT_PRIORITY = 100
AGENT_MAX_PRIORITY = 900
# The benchmark measures the engine, not the guardrails: its workspace's default limits are far above what
# any scenario sends, so the request-rate check runs on every request (its cost is measured) but never
# refuses. The runaway scenario gives its flooding agent limits of its own.
GENEROUS_LIMITS = Limits(
    requests_per_second=10_000.0,
    request_burst=100_000,
    live_holds=1_000_000,
    bookings_per_day=10_000_000,
    searches_per_minute=100_000,
)


# Of two overlapping live reservations, the later-starting one starts inside the other: joining each row
# only with the rows that start inside it is an index range scan on (calendar_id, start_time).
OVERLAPPING_LIVE_PAIRS_SQL = """
    SELECT count(*)
      FROM bookings_reservation a
      JOIN bookings_reservation b
        ON b.calendar_id = a.calendar_id
       AND b.start_time >= a.start_time AND b.start_time < a.end_time
       AND (b.start_time > a.start_time OR b.id > a.id)
     WHERE a.calendar_id = ANY(%s)
       AND a.status IN ('held', 'committed') AND b.status IN ('held', 'committed')
"""


class LocalTarget:
    kind = "local"

    def __init__(self, *, agents: int) -> None:
        slug = f"bench-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        self.workspace_slug = slug
        self.agent_pks: list[int] = []
        self.raw_keys: list[str] = []
        for index in range(agents):
            agent, _key, raw = agent_key_bootstrap(
                workspace_slug=slug,
                agent_name=f"bench-agent-{index:03d}",
                scopes=list(BENCH_SCOPES),
                priority=AGENT_PRIORITY,
                max_priority=AGENT_MAX_PRIORITY,
            )
            self.agent_pks.append(agent.pk)
            self.raw_keys.append(raw)
        first = Agent.objects.select_related("workspace").get(pk=self.agent_pks[0])
        workspace = first.workspace
        for name, value in GENEROUS_LIMITS.as_dict().items():
            setattr(workspace, f"limit_{name}", value)
        workspace.save(update_fields=[f"limit_{name}" for name in LIMIT_NAMES])
        self.actor = Actor(workspace=workspace, agent=first)

    def calendar_create(self, name: str, **settings: Any) -> str:
        return engine.calendar_create(actor=self.actor, name=name, **settings).public_id

    def agent_limits_set(self, index: int, limits: Mapping[str, float]) -> None:
        """Give agent `index` limits of its own over the workspace's (named as workspaces.limits.Limits's
        fields); saved through the ORM, so every web process drops its copy of the agent within a second
        (agentcal.local_cache)."""
        agent = Agent.objects.get(pk=self.agent_pks[index])
        for name, value in limits.items():
            setattr(agent, f"limit_{name}", value)
        agent.save(update_fields=[f"limit_{name}" for name in limits])

    def engine_session(self, index: int) -> EngineSession:
        return EngineSession(agent_pk=self.agent_pks[index % len(self.agent_pks)])

    def key(self, index: int) -> str:
        return self.raw_keys[index % len(self.raw_keys)]

    def double_bookings(self, calendars: Sequence[str], window: Span) -> int:
        """Pairs of live reservations overlapping on one calendar (the exclusion constraint forbids any)."""
        ids = list(Calendar.objects.filter(public_id__in=list(calendars)).values_list("pk", flat=True))
        with connection.cursor() as cursor:
            cursor.execute(OVERLAPPING_LIVE_PAIRS_SQL, [ids])
            return int(cursor.fetchone()[0])

    def status_counts(self, calendars: Sequence[str]) -> dict[str, int]:
        """Final state of every hold and booking on the calendars (primary rows), as the database has it."""
        with connection.cursor() as cursor:
            cursor.execute(
                """SELECT CASE WHEN r.status = 'held' AND r.expires_at <= now() THEN 'held (lapsed)'
                               ELSE r.status END, count(*)
                     FROM bookings_reservation r JOIN bookings_calendar c ON c.id = r.calendar_id
                    WHERE c.public_id = ANY(%s) AND r.is_primary
                    GROUP BY 1 ORDER BY 1""",
                [list(calendars)],
            )
            return {status: int(n) for status, n in cursor.fetchall()}


class RemoteTarget:
    """A server the benchmark did not start: only its API and the keys given (scopes as BENCH_SCOPES,
    max priority at least the mix's urgent priority, 500)."""

    kind = "remote"

    def __init__(self, *, base_url: str, keys: Sequence[str], timeout: float = 30.0) -> None:
        if not keys:
            raise ValueError("--url needs at least one --key")
        self.base_url = base_url.rstrip("/")
        self.raw_keys = list(keys)
        self.timeout = timeout

    def _client(self) -> httpx.Client:
        return http_client(
            self.base_url + "/v1",
            headers={"Authorization": f"Bearer {self.raw_keys[0]}"},
            timeout=self.timeout,
        )

    def calendar_create(self, name: str, **settings: Any) -> str:
        with self._client() as client:
            response = client.post("/calendars", json={"name": name, **settings})
        if response.status_code != 201:
            raise RuntimeError(
                f"creating a calendar at {self.base_url} failed: {response.status_code} {response.text}"
            )
        return str(response.json()["id"])

    def key(self, index: int) -> str:
        return self.raw_keys[index % len(self.raw_keys)]

    def double_bookings(self, calendars: Sequence[str], window: Span) -> int:
        """Pairs of overlapping entries in each calendar's busy list (live holds and bookings)."""
        step = MAX_AVAILABILITY_WINDOW - timedelta(days=1)
        pairs = 0
        with self._client() as client:
            for calendar in calendars:
                busy: dict[str, tuple[datetime, datetime]] = {}  # by id: windows may repeat an entry
                cursor = window.start
                while cursor < window.end:
                    until = min(cursor + step, window.end)
                    response = client.get(
                        f"/calendars/{calendar}/availability",
                        params={"start": isoformat_z(cursor), "end": isoformat_z(until)},
                    )
                    response.raise_for_status()
                    for entry in response.json()["busy"]:
                        busy[entry["id"]] = (_parse(entry["start_time"]), _parse(entry["end_time"]))
                    cursor = until
                pairs += _count_overlapping_pairs(list(busy.values()))
        return pairs


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _count_overlapping_pairs(spans: list[tuple[datetime, datetime]]) -> int:
    ordered = sorted(spans)
    pairs = 0
    for i, (_start, end) in enumerate(ordered):
        for later_start, _later_end in ordered[i + 1 :]:
            if later_start >= end:
                break
            pairs += 1
    return pairs
