"""A flood from one key cannot take a process's threads: an agent's requests in flight per process are
capped, the one over the cap refused at once with 429 before the engine, while other agents are served."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from tests.guardrails.helpers import refusals_counted
from tests.helpers import Persona, create_calendar, slot
from tests.helpers import test_database_url as database_url


def test_requests_over_the_in_flight_cap_are_refused_fast_and_others_are_served(
    make_agent: Any, settings: Any
) -> None:
    settings.AGENT_MAX_IN_FLIGHT_PER_PROCESS = 1
    busy, other = make_agent("busy"), make_agent("other")
    calendar = create_calendar(busy)
    results: dict[str, Any] = {}
    # Another transaction holds the calendar's lock: the agent's hold waits for it, in flight.
    with psycopg.connect(database_url()) as blocker:
        blocker.execute("SELECT 1 FROM bookings_calendar WHERE public_id = %s FOR UPDATE", [calendar["id"]])

        def slow(persona: Persona) -> None:
            client = persona.new_client()
            results["slow"] = client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30))

        waiting = threading.Thread(target=slow, args=(busy,))
        waiting.start()
        time.sleep(1.0)  # the hold is waiting on the lock
        started = time.monotonic()
        refused = busy.client.get("/calendars")
        assert time.monotonic() - started < 1.0
        assert refused.status_code == 429 and refused.json()["limit_name"] == "in_flight"
        assert refused.headers["Retry-After"] == "1"
        assert other.client.get("/calendars").status_code == 200, "the other agents are served meanwhile"
        blocker.rollback()
    waiting.join(timeout=30)
    assert results["slow"].status_code == 201
    assert busy.client.get("/calendars").status_code == 200, "the slot in flight is given back"
    assert refusals_counted(busy, "in_flight") == 1
