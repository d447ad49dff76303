"""A calendar linked to a Radicale calendar through the real API, and what the sync tests assert with."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection as db

from bookings.models import BusyBlock
from sync.ingest import log_records
from sync.models import Connection, IngestionRecord, RecordKind
from tests.helpers import Persona, create_calendar, iso
from tests.sync.radicale import CalDAVAccount, Human


@dataclass
class Linked:
    """An AgentCal calendar linked to the human's Radicale calendar."""

    calendar: dict[str, Any]
    connection_id: str
    account: CalDAVAccount
    human: Human

    @property
    def connection(self) -> Connection:
        return Connection.objects.select_related("calendar").get(public_id=self.connection_id)

    @property
    def pk(self) -> int:
        return self.connection.pk

    @property
    def calendar_id(self) -> str:
        return str(self.calendar["id"])


def link(persona: Persona, account: CalDAVAccount, human: Human, **calendar_settings: Any) -> Linked:
    calendar = create_calendar(persona, **calendar_settings)
    response = persona.client.post(
        f"/calendars/{calendar['id']}/connections",
        json={
            "provider": "caldav",
            "url": account.url,
            "username": account.username,
            "password": account.password,
        },
    )
    assert response.status_code == 201, response.text
    return Linked(calendar=calendar, connection_id=response.json()["id"], account=account, human=human)


def hour(hours_ahead: int, *, minutes: int = 0) -> datetime:
    """A moment on the hour `hours_ahead` from now (UTC), plus minutes."""
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return base + timedelta(hours=hours_ahead, minutes=minutes)


def span(start: datetime, minutes: int = 30) -> dict[str, str]:
    return {"start_time": iso(start), "end_time": iso(start + timedelta(minutes=minutes))}


def phone_event(
    uid: str,
    start: datetime,
    minutes: int = 30,
    *,
    sequence: int = 0,
    extra: str = "",
    modified: datetime | None = None,
) -> str:
    """A one-event VCALENDAR as a phone app writes it (LAST-MODIFIED now, as a real client sets it)."""
    fmt = "%Y%m%dT%H%M%SZ"
    now = modified or datetime.now(UTC)
    end = start + timedelta(minutes=minutes)
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Phone//Calendar//EN\r\nBEGIN:VEVENT\r\n"
        f"UID:{uid}\r\nDTSTAMP:{now:{fmt}}\r\nLAST-MODIFIED:{now:{fmt}}\r\nSEQUENCE:{sequence}\r\n"
        f"DTSTART:{start.astimezone(UTC):{fmt}}\r\nDTEND:{end.astimezone(UTC):{fmt}}\r\n"
        f"SUMMARY:Dentist\r\n{extra}END:VEVENT\r\nEND:VCALENDAR\r\n"
    )


def blocks_of(connection_pk: int) -> set[tuple[datetime, datetime, str]]:
    return {
        (b.start_time, b.end_time, b.event_key) for b in BusyBlock.objects.filter(connection_id=connection_pk)
    }


def upstream_busy(persona: Persona, calendar_id: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    response = persona.client.get(
        f"/calendars/{calendar_id}/availability", params={"start": iso(start), "end": iso(end)}
    )
    assert response.status_code == 200, response.text
    return [b for b in response.json()["busy"] if b["source"] != "agentcal"]


def holds_under_blocks() -> list[tuple[Any, ...]]:
    """SQL check: live holds overlapping an upstream busy block (must always be none)."""
    with db.cursor() as cursor:
        cursor.execute(
            """
            SELECT r.hold_id, b.id FROM bookings_reservation r
              JOIN bookings_busyblock b ON b.calendar_id = r.calendar_id
             WHERE r.status = 'held' AND r.expires_at > now()
               AND tstzrange(r.start_time, r.end_time, '[)') && tstzrange(b.start_time, b.end_time, '[)')
            """
        )
        return list(cursor.fetchall())


def unflagged_bookings_under_blocks() -> list[tuple[Any, ...]]:
    """SQL check: committed bookings overlapping a block that are not flagged (must be none)."""
    with db.cursor() as cursor:
        cursor.execute(
            """
            SELECT r.booking_id, b.id FROM bookings_reservation r
              JOIN bookings_busyblock b ON b.calendar_id = r.calendar_id
             WHERE r.status = 'committed' AND r.upstream_conflict_at IS NULL
               AND tstzrange(r.start_time, r.end_time, '[)') && tstzrange(b.start_time, b.end_time, '[)')
            """
        )
        return list(cursor.fetchall())


def append(linked: Linked, *records: IngestionRecord) -> None:
    """Records as if a fetch had logged them (tests of processing, without a server)."""
    log_records(Connection.objects.get(pk=linked.pk), records)


def resource(name: str, data: str) -> IngestionRecord:
    return IngestionRecord(kind=RecordKind.RESOURCE, resource=name, etag=f'"{hash(data)}"', payload=data)


def synced(linked: Linked, timeout: float = 20.0) -> None:
    """Run a sync now, in this process; if a Celery worker's run holds the connection, wait for it."""
    sync_now(linked.pk, timeout=timeout)


def sync_now(connection_pk: int, timeout: float = 20.0) -> Any:
    from sync.services import connection_sync

    deadline = time.monotonic() + timeout
    while (run := connection_sync(connection_pk)).outcome == "busy" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.outcome == "synced", run
    return run
