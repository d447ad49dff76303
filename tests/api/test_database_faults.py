"""PostgreSQL connections killed mid-request: 503 + Retry-After, nothing half-written, and the same
Idempotency-Key then gets the answer a calm server would have given.

Served by gunicorn as in production (persistent connections with health checks), not by the test live
server, whose connections come from a pool."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from tests.helpers import Persona, http_client, iso, overlapping_live_pairs

pytestmark = pytest.mark.slow

AGENTS = 4
REQUESTS_PER_AGENT = 12


class BackendKiller(threading.Thread):
    """Terminates every other session on the test database, over and over, until stopped."""

    def __init__(self, spare_pids: set[int]) -> None:
        super().__init__(daemon=True)
        self.spare_pids = spare_pids
        self.stop = threading.Event()
        self.killed = 0

    def run(self) -> None:
        params = connection.get_connection_params()
        with psycopg.connect(**params, autocommit=True) as conn:
            self.spare_pids.add(conn.info.backend_pid)
            while not self.stop.wait(0.015):
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> ALL(%s)"
                    " AND backend_type = 'client backend'",
                    [list(self.spare_pids)],
                ).fetchall()
                self.killed += sum(1 for (ok,) in rows if ok)


def hold_request(persona: Persona, client: Any, calendar_id: str, span: dict[str, str], key: str) -> Any:
    return client.post(f"/calendars/{calendar_id}/holds", json=span, headers={"Idempotency-Key": key})


def test_killed_connections_answer_503_and_a_retry_with_the_key_settles(
    make_agent, calendar, app_server, request
):
    agents = [make_agent(f"agent-{i}", priority=100) for i in range(AGENTS)]
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=3)
    # Few distinct slots for many requests: conflicts (409) and wins (201) both happen.
    slots = [
        {
            "start_time": iso(base + timedelta(minutes=30 * i)),
            "end_time": iso(base + timedelta(minutes=30 * i + 30)),
        }
        for i in range(8)
    ]
    counter = itertools.count()
    attempts: list[tuple[Persona, dict[str, str], str, Any]] = []
    lock = threading.Lock()

    def client_of(persona: Persona) -> Any:
        return http_client(f"{app_server}/v1", headers=dict(persona.client.headers))

    def agent_loop(persona: Persona) -> None:
        with client_of(persona) as client:
            for _ in range(REQUESTS_PER_AGENT):
                span = slots[next(counter) % len(slots)]
                key = str(uuid.uuid4())
                response = hold_request(persona, client, calendar["id"], span, key)
                with lock:
                    attempts.append((persona, span, key, response))

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own_pid,) = cursor.fetchone()
    killer = BackendKiller({own_pid})
    killer.start()
    try:
        with ThreadPoolExecutor(AGENTS) as pool:
            list(pool.map(agent_loop, agents))
    finally:
        killer.stop.set()
        killer.join()
        # The killer also ended this process's pooled connections, some while the pool was opening
        # them; such a pool was seen to hand out nothing for its whole timeout in the next test.
        request.addfinalizer(connections["default"].close_pool)  # type: ignore[attr-defined]

    statuses = [response.status_code for *_, response in attempts]
    assert set(statuses) <= {201, 409, 503}, [
        r.text for *_, r in attempts if r.status_code not in (201, 409, 503)
    ]
    unavailable = [a for a in attempts if a[3].status_code == 503]
    assert killer.killed > 0 and unavailable, f"the faults never hit a request: {statuses}"
    for *_, response in unavailable:
        assert response.headers["content-type"] == "application/problem+json"
        assert int(response.headers["Retry-After"]) >= 1
        assert response.json()["error"] == "service_unavailable"
        assert response.json()["retryable"] is True

    # The database is back: every request retried with its own key settles, and settles for good.
    clients = {persona.id: client_of(persona) for persona in agents}
    for persona, span, key, response in attempts:
        client = clients[persona.id]
        retry = hold_request(persona, client, calendar["id"], span, key)
        deadline = time.monotonic() + 10
        while retry.status_code == 409 and retry.json()["error"] == "idempotency_in_progress":
            assert time.monotonic() < deadline, retry.text
            time.sleep(0.2)
            retry = hold_request(persona, client, calendar["id"], span, key)
        assert retry.status_code in (201, 409), retry.text
        if response.status_code != 503:
            assert retry.headers.get("Idempotent-Replayed") == "true", (response.text, retry.text)
            assert (retry.status_code, retry.json()) == (response.status_code, response.json())
        again = hold_request(persona, client, calendar["id"], span, key)
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert (again.status_code, again.json()) == (retry.status_code, retry.json())

    for client in clients.values():
        client.close()
    assert overlapping_live_pairs(calendar["id"]) == []
