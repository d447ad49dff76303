"""The write path's plumbing (agentcal.db): one statement for a write's rows, all or nothing; new rows
get their own ids; nothing is left prepared on the connection (so PgBouncer's transaction mode works)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from agentcal.db import InsertBatch
from audit.models import AuditRecord
from bookings import engine
from bookings.models import Reservation, ReservationStatus
from tests.bookings.helpers import half_hour
from workspaces.actor import Actor

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_multi_calendar_hold_gets_one_row_per_calendar_with_its_own_id(actor: Actor) -> None:
    calendars = [engine.calendar_create(actor=actor, name=f"room {i}") for i in range(3)]
    group = engine.hold_create(
        actor=actor, calendar=calendars[1], span=half_hour(30), also_calendars=[calendars[2], calendars[0]]
    )

    assert [row.calendar_id for row in group.rows] == [calendars[1].pk, calendars[0].pk, calendars[2].pk]
    for row in group.rows:  # the ids the batch INSERT returned belong to the rows they were given to
        stored = Reservation.objects.get(pk=row.pk)
        assert (stored.calendar_id, stored.is_primary) == (
            row.calendar_id,
            row.calendar_id == calendars[1].pk,
        )
    assert AuditRecord.objects.filter(reservation_public_id=group.primary.hold_id).count() == 1


def test_a_batch_that_fails_writes_none_of_its_rows(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    span = half_hour(31)
    taken = engine.hold_create(actor=actor, calendar=calendar, span=span).primary
    audit_before = AuditRecord.objects.count()

    batch = InsertBatch()
    batch.add(AuditRecord, {"public_id": "aud_batchtest", "event_type": "test", "outcome": "success"})
    overlapping = {
        field.attname: getattr(taken, field.attname)
        for field in Reservation._meta.concrete_fields
        if not field.primary_key
    }
    batch.add(Reservation, {**overlapping, "hold_id": "hld_batchtest"})
    with pytest.raises(IntegrityError, match="reservation_no_overlapping_live"), transaction.atomic():
        batch.execute(returning=Reservation)

    assert AuditRecord.objects.count() == audit_before
    assert not Reservation.objects.filter(hold_id="hld_batchtest").exists()
    assert Reservation.objects.get(pk=taken.pk).status == ReservationStatus.HELD


def _prepared_statements() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return int(cursor.fetchone()[0])


def test_the_write_path_leaves_no_prepared_statement_on_the_connection(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    connection.close()  # a fresh connection
    for hours in range(32, 35):
        group = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(hours))
        assert group.hold_token is not None
        engine.hold_commit(actor=actor, calendar=calendar, hold_token=group.hold_token)
    assert _prepared_statements() == 0
