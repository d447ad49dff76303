"""The common writes as one statement (bookings/engine/fastpath.py): what they write is what the
general path writes, field for field — the rows, the audit row, the event's payload the database
helped build — and nothing is written, announced or counted when they do not happen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agentcal.clock import isoformat_z
from agentcal.errors import HoldExpired, SlotConflict
from agentcal.metrics import AUDITED_EVENTS
from audit.models import AuditRecord
from bookings import engine
from bookings.events import reservation_data
from bookings.models import Calendar, Reservation
from bookings.selectors import reservation_group
from bookings.sql import iso_z
from tests.bookings.helpers import half_hour
from tests.helpers import cyclic_garbage
from webhooks.models import OutboxEvent
from workspaces.actor import Actor
from workspaces.models import Agent

pytestmark = pytest.mark.django_db(transaction=True)


def stored(hold_id: str) -> list[Reservation]:
    return reservation_group(
        workspace=Reservation.objects.get(hold_id=hold_id, is_primary=True).calendar.workspace,
        hold_id=hold_id,
    )


def event_for(key: str, public_id: str, event_type: str) -> dict:
    (event,) = [
        e for e in OutboxEvent.objects.filter(event_type=event_type) if e.payload[key]["id"] == public_id
    ]
    return event.payload


def counted(event_type: str, outcome: str = "success") -> float:
    return AUDITED_EVENTS.labels(event_type, outcome, "")._value.get()


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, 0, 5, tzinfo=UTC),
        datetime(2031, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        None,
    ],
)
def test_the_database_writes_times_as_isoformat_z_does(moment: datetime | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {iso_z('%s::timestamptz')}", [moment])
        (written,) = cursor.fetchone()
    assert written == (isoformat_z(moment) if moment is not None else None)


def test_a_hold_written_in_one_statement_is_what_the_general_path_writes(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room", hold_ttl_seconds=90)
    before = counted("calendar.hold.created")

    group = engine.hold_create(
        actor=actor, calendar=calendar, span=half_hour(30), title="Intro", metadata={"a": 1}
    )

    head = group.primary
    rows = stored(head.hold_id)
    (row,) = rows
    # What the caller got is what was stored, the database's decisions included.
    assert (row.pk, row.fencing_token, row.created_at, row.expires_at) == (
        head.pk,
        head.fencing_token,
        head.created_at,
        head.expires_at,
    )
    assert row.expires_at == row.created_at + timedelta(seconds=90)
    assert row.fencing_token == Calendar.objects.get(pk=calendar.pk).version
    assert event_for("hold", head.hold_id, "hold.created") == {"hold": reservation_data(rows)}
    (audited,) = AuditRecord.objects.filter(
        event_type="calendar.hold.created", reservation_public_id=head.hold_id
    )
    assert audited.fencing_token == row.fencing_token
    assert counted("calendar.hold.created") == before + 1  # counted once it committed


def test_a_booking_in_one_step_written_in_one_statement_is_what_the_general_path_writes(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room", bump_window_seconds=45)

    group = engine.booking_create(actor=actor, calendar=calendar, span=half_hour(30))

    rows = stored(group.primary.hold_id)
    (row,) = rows
    assert row.status == "committed" and row.booking_id == group.primary.booking_id
    assert row.booking_id is not None and row.committed_at is not None
    assert row.committed_at == row.created_at == group.primary.committed_at
    assert row.bump_window_ends_at == row.committed_at + timedelta(seconds=45)
    assert event_for("booking", row.booking_id, "booking.committed") == {"booking": reservation_data(rows)}


def test_a_commit_written_in_one_statement_is_what_the_general_path_writes(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    held = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
    version = Calendar.objects.get(pk=calendar.pk).version
    before = counted("calendar.commit.created")

    assert held.hold_token is not None
    group = engine.hold_commit(actor=actor, calendar=calendar, hold_token=held.hold_token)

    rows = stored(held.primary.hold_id)
    (row,) = rows
    assert row.booking_id is not None
    assert (row.status, row.booking_id, row.committed_at, row.bump_window_ends_at) == (
        "committed",
        group.primary.booking_id,
        group.primary.committed_at,
        group.primary.bump_window_ends_at,
    )
    assert row.version == group.primary.version == 2
    assert Calendar.objects.get(pk=calendar.pk).version == version + 1  # the commit took the lock
    assert event_for("booking", row.booking_id, "booking.committed") == {"booking": reservation_data(rows)}
    (audited,) = AuditRecord.objects.filter(
        event_type="calendar.commit.created", reservation_public_id=row.booking_id
    )
    assert audited.details == {"hold_id": row.hold_id, "from_hold": True}
    assert (audited.requested_start, audited.requested_end, audited.fencing_token) == (
        row.start_time,
        row.end_time,
        row.fencing_token,
    )
    assert (audited.workspace_id, audited.calendar_public_id, audited.agent_public_id) == (
        calendar.workspace_id,
        calendar.public_id,
        actor.agent_public_id,
    )
    assert counted("calendar.commit.created") == before + 1
    # What the caller got is the row as stored.
    assert {f.attname: getattr(group.primary, f.attname) for f in Reservation._meta.concrete_fields} == {
        f.attname: getattr(row, f.attname) for f in Reservation._meta.concrete_fields
    }


def test_a_refused_hold_writes_counts_and_announces_nothing_but_its_refusal(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    span = half_hour(30)
    engine.hold_create(actor=actor, calendar=calendar, span=span)
    version = Calendar.objects.get(pk=calendar.pk).version
    events, created = OutboxEvent.objects.count(), counted("calendar.hold.created")
    rival = Actor(
        workspace=actor.workspace,
        agent=Agent.objects.create(workspace=actor.workspace, name="rival", slug="rival", priority=100),
    )

    with pytest.raises(SlotConflict) as refused:
        engine.hold_create(actor=rival, calendar=calendar, span=span)

    assert refused.value.extra["alternatives"]
    assert Calendar.objects.get(pk=calendar.pk).version == version
    assert OutboxEvent.objects.count() == events
    assert counted("calendar.hold.created") == created
    assert Reservation.objects.filter(calendar=calendar).count() == 1
    assert AuditRecord.objects.filter(event_type="calendar.hold.rejected").count() == 1


def test_the_commit_of_a_lapsed_hold_is_refused_without_moving_the_calendars_version(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    held = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
    Reservation.objects.filter(pk=held.primary.pk).update(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    version = Calendar.objects.get(pk=calendar.pk).version
    events = OutboxEvent.objects.count()

    assert held.hold_token is not None
    with pytest.raises(HoldExpired):
        engine.hold_commit(actor=actor, calendar=calendar, hold_token=held.hold_token)

    assert Calendar.objects.get(pk=calendar.pk).version == version
    assert OutboxEvent.objects.count() == events
    assert Reservation.objects.get(pk=held.primary.pk).status == "held"  # lapsed; the sweep expires it


def test_a_span_holding_a_lapsed_hold_takes_the_general_path_which_expires_it(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    span = half_hour(30)
    lapsed = engine.hold_create(actor=actor, calendar=calendar, span=span).primary
    Reservation.objects.filter(pk=lapsed.pk).update(expires_at=datetime.now(UTC) - timedelta(seconds=1))

    group = engine.hold_create(actor=actor, calendar=calendar, span=span)

    assert Reservation.objects.get(pk=lapsed.pk).status == "expired"
    assert AuditRecord.objects.filter(
        event_type="calendar.hold.expired", reservation_public_id=lapsed.hold_id
    ).exists()
    assert Reservation.objects.get(pk=group.primary.pk).status == "held"


def test_inside_a_callers_transaction_the_one_statement_write_is_not_used(actor: Actor) -> None:
    # The engine's writes are durable transactions of their own; one statement in autocommit would
    # commit inside the caller's transaction. The general path refuses, as it always did.
    from django.db import transaction

    calendar = engine.calendar_create(actor=actor, name="room")
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
    assert not Reservation.objects.filter(calendar=calendar).exists()


def test_a_refused_hold_leaves_no_reference_cycles(actor: Actor) -> None:
    """A herd's loser, called in-process (the engine's own callers, the benchmark's in-process mode):
    its conflict and the pre-check's verdict it was raised from are freed when the caller lets go of
    the conflict, not left for the cyclic collector."""
    calendar = engine.calendar_create(actor=actor, name="room")
    engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))

    def refused() -> None:
        with pytest.raises(SlotConflict) as conflict:
            engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
        assert conflict.value.extra["alternatives"]
        del conflict  # pytest's record of it holds the traceback, as any caller's would while it looks

    refused()  # once first: caches fill
    _, found = cyclic_garbage(refused)
    assert not found
