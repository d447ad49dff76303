"""Write-behind: our committed bookings are copied to the linked upstream calendar, so the people
whose calendar it is see them in their own apps.

Reconciling, not replaying: each run compares the calendar's committed bookings with the copies
recorded upstream (UpstreamCopy) and creates, rewrites or removes the difference. The upstream name
derives from the booking id and a create never overwrites (CalDAV `If-None-Match: *`, Google's
client-supplied event id), so a retried or concurrent run cannot write a booking twice: the second
create is refused and adopts what is there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import IntegrityError

from agentcal.clock import server_now
from bookings.models import Reservation, ReservationStatus
from sync.models import Connection, UpstreamCopy
from sync.providers.base import BookingCopy
from sync.providers.registry import provider_for

# Bookings that ended longer ago than this are left as they are upstream (history, not plans).
WRITE_BEHIND_PAST = timedelta(days=1)


@dataclass
class WriteBehind:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _fingerprint(row: Reservation) -> str:
    state = f"{row.start_time.isoformat()}|{row.end_time.isoformat()}|{row.title}"
    return hashlib.sha256(state.encode()).hexdigest()


def _copy(row: Reservation, *, sequence: int, stamp: datetime) -> BookingCopy:
    assert row.booking_id is not None
    return BookingCopy(
        booking_id=row.booking_id,
        start=row.start_time,
        end=row.end_time,
        summary=row.title or "Booked by AgentCal",
        description=f"Booked by agent {row.agent.name} through AgentCal (booking {row.booking_id}).",
        sequence=sequence,
        stamp=stamp,
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
            # Idempotent by construction: the upstream name comes from the booking id, and a second
            # create finds it there (AlreadyThere) instead of writing it again.
            name, etag = provider.create_copy(connection, _copy(row, sequence=0, stamp=now))
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
            etag = provider.update_copy(
                connection, copy.resource_name, _copy(row, sequence=sequence, stamp=now)
            )
            UpstreamCopy.objects.filter(pk=copy.pk).update(
                etag=etag or "", fingerprint=fingerprint, sequence=sequence
            )
            done.updated.append(booking_id)
    for booking_id, copy in copies.items():
        if booking_id in wanted or _still_committed(booking_id):
            continue
        provider.remove_copy(connection, copy.resource_name)
        UpstreamCopy.objects.filter(pk=copy.pk).delete()
        done.removed.append(booking_id)
    return done


def _still_committed(booking_id: str) -> bool:
    """A booking that simply lies in the past keeps its copy upstream; only one that was cancelled
    or bumped (or is gone) is removed."""
    return Reservation.objects.filter(booking_id=booking_id, status=ReservationStatus.COMMITTED).exists()
