"""Write-behind: our committed bookings are copied to the linked upstream calendar, so the people
whose calendar it is see them in their own apps.

Reconciling, not replaying: each run compares the calendar's committed bookings with the copies
recorded upstream (UpstreamCopy) and creates, rewrites or removes the difference. The resource name
and UID derive from the booking id, and a create is `If-None-Match: *`, so a retried or concurrent
run cannot write a booking twice: the second create gets 412 and adopts what is there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import IntegrityError

from agentcal.clock import server_now
from bookings.models import Reservation, ReservationStatus
from sync import caldav
from sync.ical import booking_ics
from sync.models import Connection, UpstreamCopy
from sync.providers import provider_for

# Bookings that ended longer ago than this are left as they are upstream (history, not plans).
WRITE_BEHIND_PAST = timedelta(days=1)


def resource_name(booking_id: str) -> str:
    return f"{booking_id}.ics"


def event_uid(booking_id: str) -> str:
    return f"{booking_id}@agentcal"


@dataclass
class WriteBehind:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _fingerprint(row: Reservation) -> str:
    return hashlib.sha256(
        f"{row.start_time.isoformat()}|{row.end_time.isoformat()}|{row.title}".encode()
    ).hexdigest()


def _ics(row: Reservation, *, sequence: int, stamp: datetime) -> str:
    assert row.booking_id is not None
    return booking_ics(
        uid=event_uid(row.booking_id),
        start=row.start_time,
        end=row.end_time,
        summary=row.title or "Booked by AgentCal",
        description=f"Booked by agent {row.agent.name} through AgentCal (booking {row.booking_id}).",
        sequence=sequence,
        stamp=stamp,
        booking_id=row.booking_id,
    )


def write_behind(connection_id: int) -> WriteBehind:
    """Bring the upstream calendar's copies of our bookings in line with the committed bookings.
    Provider errors propagate (the task retries them, honouring Retry-After)."""
    connection = Connection.objects.select_related("calendar").get(pk=connection_id)
    provider = provider_for(connection)
    now = server_now()
    wanted = {
        row.booking_id: row
        for row in Reservation.objects.filter(
            calendar=connection.calendar,
            status=ReservationStatus.COMMITTED,
            end_time__gt=now - WRITE_BEHIND_PAST,
        ).select_related("agent")
    }
    copies = {copy.booking_id: copy for copy in UpstreamCopy.objects.filter(connection=connection)}
    done = WriteBehind()
    for booking_id, row in wanted.items():
        assert booking_id is not None
        copy = copies.get(booking_id)
        fingerprint = _fingerprint(row)
        if copy is None:
            name = resource_name(booking_id)
            try:
                etag = provider.put(
                    connection, name, _ics(row, sequence=0, stamp=now), create=True, etag=None
                )
            except caldav.PreconditionFailed:
                etag = None  # already there: an earlier or concurrent run wrote it
            try:
                UpstreamCopy.objects.create(
                    connection=connection,
                    booking_id=booking_id,
                    resource_name=name,
                    etag=etag or "",
                    fingerprint=fingerprint,
                )
            except IntegrityError:
                continue  # a concurrent run recorded it first
            done.created.append(booking_id)
        elif copy.fingerprint != fingerprint:
            sequence = copy.sequence + 1
            ics = _ics(row, sequence=sequence, stamp=now)
            etag = provider.put(connection, copy.resource_name, ics, create=False, etag=None)
            UpstreamCopy.objects.filter(pk=copy.pk).update(
                etag=etag or "", fingerprint=fingerprint, sequence=sequence
            )
            done.updated.append(booking_id)
    for booking_id, copy in copies.items():
        if booking_id in wanted or _still_committed(booking_id):
            continue
        provider.remove(connection, copy.resource_name)
        UpstreamCopy.objects.filter(pk=copy.pk).delete()
        done.removed.append(booking_id)
    return done


def _still_committed(booking_id: str) -> bool:
    """A booking that simply lies in the past keeps its copy upstream; only one that was cancelled
    or bumped (or is gone) is removed."""
    return Reservation.objects.filter(booking_id=booking_id, status=ReservationStatus.COMMITTED).exists()
