"""Small helpers shared by the booking tests: request shortcuts, polling the server's state, row checks.

Time-dependent tests poll the server (whose clock is the database's) instead of sleeping a guessed
amount: they wait until the API itself reports the state, with a deadline so a bug fails fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from django.db.models import Q
from django.db.models.functions import Now

from agentcal.clock import server_now
from bookings.models import Reservation
from bookings.spans import Span
from tests.helpers import Persona

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Working hours Monday to Friday, 09:00-17:00 in the calendar's zone.
NINE_TO_FIVE = {day: [["09:00", "17:00"]] for day in ("mon", "tue", "wed", "thu", "fri")}


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def hold(persona: Persona, calendar_id: str, span: dict[str, str], **fields: Any) -> httpx.Response:
    return persona.client.post(f"/calendars/{calendar_id}/holds", json={**span, **fields})


def commit(persona: Persona, calendar_id: str, span: dict[str, str], **fields: Any) -> httpx.Response:
    return persona.client.post(f"/calendars/{calendar_id}/commits", json={**span, **fields})


def commit_hold(persona: Persona, calendar_id: str, hold_token: str, **fields: Any) -> httpx.Response:
    return persona.client.post(f"/calendars/{calendar_id}/commits", json={"hold_token": hold_token, **fields})


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    return response.json()


def problem(response: httpx.Response, status: int, error: str) -> dict[str, Any]:
    """The problem+json body of an expected error response.

    The body's own `status` member is checked by dedicated tests (test_hold_lifecycle,
    test_booking_cancel), so that one wrong member does not hide everything else a test checks.
    """
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["error"] == error, body
    return body


def wait_until(
    fetch: Callable[[], httpx.Response],
    predicate: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 15.0,
    interval: float = 0.1,
) -> dict[str, Any]:
    """Poll `fetch` until its JSON body satisfies `predicate`; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        response = fetch()
        assert response.status_code == 200, response.text
        body = response.json()
        if predicate(body):
            return body
        assert time.monotonic() < deadline, f"state never reached within {timeout}s; last: {body}"
        time.sleep(interval)


def wait_for_hold_status(
    persona: Persona, hold_id: str, status: str, *, timeout: float = 15.0
) -> dict[str, Any]:
    return wait_until(
        lambda: persona.client.get(f"/holds/{hold_id}"), lambda b: b["status"] == status, timeout=timeout
    )


def wait_until_frozen(persona: Persona, booking_id: str, *, timeout: float = 15.0) -> dict[str, Any]:
    return wait_until(
        lambda: persona.client.get(f"/bookings/{booking_id}"), lambda b: b["frozen"] is True, timeout=timeout
    )


def parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def overlaps(a: dict[str, str], b: dict[str, str]) -> bool:
    """Half-open [start, end) overlap of two spans given as RFC 3339 strings."""
    return parse(a["start_time"]) < parse(b["end_time"]) and parse(b["start_time"]) < parse(a["end_time"])


def on_grid(moment: str, slot_minutes: int) -> bool:
    return (parse(moment) - EPOCH) % timedelta(minutes=slot_minutes) == timedelta(0)


def rows_of(calendar_id: str, **filters: Any) -> list[Reservation]:
    return list(Reservation.objects.filter(calendar__public_id=calendar_id, **filters).order_by("id"))


def live_spans(calendar_id: str) -> list[dict[str, str]]:
    """Reservations on the calendar that block right now (live, and not a lapsed hold), per the database."""
    rows = Reservation.objects.filter(
        calendar__public_id=calendar_id, status__in=["held", "committed"]
    ).exclude(Q(status="held") & Q(expires_at__lte=Now()))
    return [{"start_time": _z(r.start_time), "end_time": _z(r.end_time)} for r in rows]


def _z(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def half_hour(hours_ahead: int) -> Span:
    """A 30-minute span starting on the hour, `hours_ahead` from the database's now."""
    start = server_now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours_ahead)
    return Span(start, start + timedelta(minutes=30))
