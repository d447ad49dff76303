"""docs/agents.md's examples run verbatim against the live server: each snippet is read from the document
and executed as a reader would, with only its environment variables set (the meeting across time zones; a
bumped booking moved back from its signed webhook delivery)."""

from __future__ import annotations

import base64
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bookings.models import Reservation
from tests.helpers import Persona, create_calendar, slot
from webhooks.models import OutboxEvent
from webhooks.outbox import webhook_body
from webhooks.signing import signed_headers

pytestmark = pytest.mark.django_db(transaction=True)

AGENTS_MD = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def python_snippet(section: str) -> str:
    """The first ```python block under the `## {section}` heading."""
    text = AGENTS_MD.read_text()
    after_heading = text[text.index(f"\n## {section}\n") :]
    found = re.search(r"```python\n(.*?)```", after_heading, re.DOTALL)
    assert found is not None, f"no python block under {section!r}"
    return found.group(1)


def test_the_three_time_zone_example_finds_holds_and_commits_inside_everyones_hours(
    sdr: Persona, live_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTCAL_API_KEY", sdr.raw_key)
    monkeypatch.setenv("AGENTCAL_BASE_URL", live_server.url)
    namespace: dict[str, Any] = {"__name__": "agents_md_example"}

    exec(compile(python_snippet("A meeting across time zones"), str(AGENTS_MD), "exec"), namespace)  # noqa: S102
    namespace["client"].close()

    booking, found, hold = namespace["booking"], namespace["found"], namespace["hold"]
    assert booking.status == "committed" and booking.hold_id == hold.id
    assert hold.candidate_rank == 1 and hold.start_time == found.candidates[0].start_time
    # Every person's local start is inside the hours the example gave them, on a weekday.
    for calendar in namespace["people"].values():
        local = hold.start_time.astimezone(ZoneInfo(calendar.timezone))
        (hours,) = calendar.working_hours[local.strftime("%a").lower()]
        assert (
            hours[0] <= local.strftime("%H:%M")
            and (local + (hold.end_time - hold.start_time)).strftime("%H:%M") <= hours[1]
        )
    rows = Reservation.objects.filter(booking_id=booking.id)
    assert {row.calendar.public_id for row in rows} == set(namespace["calendars"])
    printed = capsys.readouterr().out
    assert "Ana: " in printed and "(Asia/Kolkata)" in printed and f"booked {booking.id}" in printed


def test_the_bumped_booking_example_moves_it_back_to_the_events_first_alternative(
    sdr: Persona,
    exec_assistant: Persona,
    live_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = "whsec_" + base64.b64encode(b"agents-md-example-secret").decode()
    monkeypatch.setenv("AGENTCAL_API_KEY", sdr.raw_key)
    monkeypatch.setenv("AGENTCAL_BASE_URL", live_server.url)
    monkeypatch.setenv("AGENTCAL_WEBHOOK_SECRET", secret)
    calendar = create_calendar(sdr, bump_window_seconds=600)["id"]
    span = slot(minutes=30)
    victim = sdr.client.post(f"/calendars/{calendar}/commits", json={**span, "priority": 100}).json()
    taker = exec_assistant.client.post(f"/calendars/{calendar}/commits", json={**span, "priority": 900})
    assert taker.status_code == 201, taker.text
    (event,) = OutboxEvent.objects.filter(event_type="booking.bumped")
    body = webhook_body(event)
    headers = signed_headers(secret=secret, msg_id=event.public_id, timestamp=int(time.time()), body=body)
    namespace: dict[str, Any] = {"__name__": "agents_md_example"}

    exec(compile(python_snippet("When a booking is bumped"), str(AGENTS_MD), "exec"), namespace)  # noqa: S102
    namespace["on_delivery"](body, headers)
    namespace["on_delivery"](body, headers)  # a redelivery: replayed, not moved again
    namespace["client"].close()

    first = event.payload["alternatives"][0]
    rows = Reservation.objects.filter(booking_id=victim["id"])
    assert {(row.status, row.start_time) for row in rows} == {
        ("committed", datetime.fromisoformat(first["start_time"]))
    }
    assert OutboxEvent.objects.filter(event_type="booking.moved").count() == 1
    assert f"moved {victim['id']}" in capsys.readouterr().out
