"""An agent written against the package openapi-python-client generates: two agents race for one slot,
the loser takes the first alternative the 409 offers, commits it and cancels the booking. Each step is
printed as a JSON line."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta

from agentcal_api import AuthenticatedClient
from agentcal_api.api.bookings import cancel_booking
from agentcal_api.api.calendars import (
    commit_booking,
    create_hold,
    get_availability,
    list_calendars,
)
from agentcal_api.models import (
    AvailabilityOutput,
    BookingOutput,
    CalendarPage,
    CommitHoldInput,
    ConflictProblemOutput,
    HoldCreatedOutput,
    HoldInput,
)


def setting(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"{name} is not set")
    return value


def report(step: str, **facts: object) -> None:
    print(json.dumps({"step": step, **facts}), flush=True)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def main() -> None:
    base_url = setting("AGENTCAL_BASE_URL")
    calendar_id = setting("AGENTCAL_CALENDAR_ID")
    planner = AuthenticatedClient(base_url=base_url, token=setting("AGENTCAL_KEY"))
    rival = AuthenticatedClient(base_url=base_url, token=setting("AGENTCAL_SECOND_KEY"))

    listed = list_calendars.sync_detailed(client=planner).parsed
    if not isinstance(listed, CalendarPage):
        raise SystemExit(f"listing calendars answered {listed}")
    report("calendars", ids=[calendar.id for calendar in listed.results])

    tomorrow = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    availability = get_availability.sync_detailed(
        calendar_id, client=planner, start=tomorrow, end=tomorrow + timedelta(hours=8), duration_minutes=30
    )
    etag = availability.headers.get("ETag")
    free_time = availability.parsed
    if etag is None or not isinstance(free_time, AvailabilityOutput) or not free_time.free_slots:
        raise SystemExit(f"availability answered {availability.status_code} without a free slot")
    free = free_time.free_slots[0]
    report(
        "availability", etag=etag, free={"start_time": iso(free.start_time), "end_time": iso(free.end_time)}
    )
    start, end = free.start_time, free.start_time + timedelta(minutes=30)
    span = {"start_time": iso(start), "end_time": iso(end)}

    held = create_hold.sync_detailed(
        calendar_id,
        client=planner,
        body=HoldInput(start_time=start, end_time=end),
        if_match=etag,
        idempotency_key=str(uuid.uuid4()),
    ).parsed
    if not isinstance(held, HoldCreatedOutput):
        raise SystemExit(f"the hold answered {held}")
    report("hold", agent="planner", id=held.id, status=held.status.value, **span)

    refused = create_hold.sync_detailed(
        calendar_id,
        client=rival,
        body=HoldInput(start_time=start, end_time=end),
        idempotency_key=str(uuid.uuid4()),
    )
    conflict = refused.parsed
    if not isinstance(conflict, ConflictProblemOutput) or not conflict.alternatives:
        raise SystemExit(f"the second hold answered {refused.status_code}, not a conflict with alternatives")
    alternatives = [
        {"start_time": iso(offered.start_time), "end_time": iso(offered.end_time)}
        for offered in conflict.alternatives
    ]
    report(
        "conflict", agent="rival", status=refused.status_code, error=conflict.error, alternatives=alternatives
    )
    alternative = conflict.alternatives[0]

    rehold = create_hold.sync_detailed(
        calendar_id,
        client=rival,
        body=HoldInput(start_time=alternative.start_time, end_time=alternative.end_time),
        idempotency_key=str(uuid.uuid4()),
    ).parsed
    if not isinstance(rehold, HoldCreatedOutput):
        raise SystemExit(f"holding the alternative answered {rehold}")
    report("hold", agent="rival", id=rehold.id, status=rehold.status.value, **alternatives[0])

    committed = commit_booking.sync_detailed(
        calendar_id,
        client=rival,
        body=CommitHoldInput(hold_token=rehold.hold_token),
        idempotency_key=str(uuid.uuid4()),
    ).parsed
    if not isinstance(committed, BookingOutput):
        raise SystemExit(f"the commit answered {committed}")
    report("commit", agent="rival", booking_id=committed.id, status=committed.status.value)

    cancelled = cancel_booking.sync_detailed(
        committed.id, client=rival, idempotency_key=str(uuid.uuid4())
    ).parsed
    if not isinstance(cancelled, BookingOutput):
        raise SystemExit(f"the cancel answered {cancelled}")
    report("cancel", agent="rival", booking_id=cancelled.id, status=cancelled.status.value)


if __name__ == "__main__":
    main()
