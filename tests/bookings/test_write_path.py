"""The write path's plumbing (agentcal.db): one statement for a write's rows, all or nothing; new rows
get their own ids; statements are prepared on the connection, except behind a transaction pooler (where
a prepared statement would be on someone else's server connection by the next transaction)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import IntegrityError, connection, connections, transaction
from django.db.utils import load_backend

from agentcal.db import InsertBatch
from audit.models import AuditRecord
from bookings import engine
from bookings.models import Reservation, ReservationStatus
from bookings.selectors import reservation_group
from tests.bookings.helpers import half_hour
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

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


@pytest.fixture
def connection_options() -> Iterator[dict[str, object]]:
    """This thread's connection rebuilt from settings with OPTIONS the test changes (no test pool)."""
    pooled = connections["default"]
    options = {k: v for k, v in pooled.settings_dict["OPTIONS"].items() if k != "pool"}
    rebuilt = load_backend(pooled.settings_dict["ENGINE"]).DatabaseWrapper(
        {**pooled.settings_dict, "OPTIONS": options}, "default"
    )
    connections["default"] = rebuilt
    try:
        yield options
    finally:
        rebuilt.close()
        connections["default"] = pooled


def _book_more_than_the_threshold(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    for hours in range(32, 33 + settings.PREPARE_THRESHOLD):
        group = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(hours))
        assert group.hold_token is not None
        engine.hold_commit(actor=actor, calendar=calendar, hold_token=group.hold_token)


def test_the_write_path_prepares_its_statements_on_the_connection(
    actor: Actor, connection_options: dict[str, object]
) -> None:
    _book_more_than_the_threshold(actor)
    assert _prepared_statements() >= 2  # the hold and the commit at least


def test_behind_a_transaction_pooler_the_write_path_prepares_nothing(
    actor: Actor, connection_options: dict[str, object]
) -> None:
    connection_options["prepare_threshold"] = _settings_with(DB_TRANSACTION_POOLER="1")
    _book_more_than_the_threshold(actor)
    assert _prepared_statements() == 0


def _settings_with(**environ: str) -> object:
    """The prepare_threshold the settings module computes under these environment variables."""
    script = "import agentcal.settings as s; print(s.DATABASES['default']['OPTIONS']['prepare_threshold'])"
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **environ},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return None if out == "None" else int(out)


def test_the_pooler_setting_turns_preparing_off_unless_told_the_pooler_carries_them() -> None:
    assert _settings_with(DB_TRANSACTION_POOLER="0") == settings.PREPARE_THRESHOLD
    assert _settings_with(DB_TRANSACTION_POOLER="1") is None
    assert _settings_with(DB_TRANSACTION_POOLER="1", DB_PREPARED_STATEMENTS="1") == settings.PREPARE_THRESHOLD


def test_unsaved_makes_what_the_model_makes(actor: Actor) -> None:
    """agentcal.db.unsaved: the instance Model.__init__ would make (defaults, related instances, ids),
    field for field, and the same refusal of an unknown argument."""
    from datetime import UTC, datetime

    from agentcal.db import unsaved
    from bookings.models import Calendar

    calendar = engine.calendar_create(actor=actor, name="room")
    at = datetime(2027, 1, 4, 9, tzinfo=UTC)
    given = {"hold_id": "hld_x", "calendar": calendar, "agent": actor.agent, "start_time": at, "end_time": at}
    ours, theirs = unsaved(Reservation, **given), Reservation(**given)
    for field in Reservation._meta.concrete_fields:
        assert getattr(ours, field.attname) == getattr(theirs, field.attname), field.name
    assert ours.calendar is calendar and ours.agent is actor.agent  # no query: the instances given
    assert ours._state.adding and ours._state.db is None
    assert ours.attendees == [] and ours.attendees is not unsaved(Reservation, **given).attendees
    assert unsaved(Calendar, id=7, public_id="cal_x").public_id == "cal_x"
    assert unsaved(Calendar).public_id != unsaved(Calendar).public_id  # callable defaults run per instance
    from audit.models import AuditRecord

    # Defaults the database makes (DatabaseDefault markers) and ones given as values, as the model has them.
    ours_audit, model_audit = unsaved(AuditRecord, outcome="success"), AuditRecord(outcome="success")
    for field in AuditRecord._meta.concrete_fields:
        if field.name != "public_id":  # a callable default: a new id each time
            ours_value, model_value = getattr(ours_audit, field.attname), getattr(model_audit, field.attname)
            assert type(ours_value) is type(model_value), field.name
            # A DatabaseDefault compares by identity; what it stands for is its expression.
            assert (
                vars(ours_value) == vars(model_value)
                if hasattr(ours_value, "expression")
                else (ours_value == model_value)
            ), field.name
    with pytest.raises(TypeError, match="nonsense"):
        unsaved(Reservation, nonsense=1)
    with pytest.raises(TypeError):
        Reservation(nonsense=1)  # type: ignore[misc]


def test_loaded_makes_what_from_db_makes(actor: Actor) -> None:
    """agentcal.db.loaded: the saved instance Model.from_db would make from a row, field for field,
    with the fields not read left deferred; a model with init receivers still goes through from_db."""
    from django.db.models.signals import post_init

    from agentcal.db import loaded

    calendar = engine.calendar_create(actor=actor, name="room")
    engine.hold_create(actor=actor, calendar=calendar, span=half_hour(1))
    attnames = [f.attname for f in Reservation._meta.concrete_fields]
    row = Reservation.objects.values_list(*attnames).get()
    ours, theirs = loaded(Reservation, attnames, row), Reservation.from_db("default", attnames, row)
    for name in attnames:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert not ours._state.adding and ours._state.db == "default" and ours == theirs
    assert ours.get_deferred_fields() == theirs.get_deferred_fields() == set()
    some = attnames[:3]
    partial, expected = loaded(Reservation, some, row[:3]), Reservation.from_db("default", some, row[:3])
    assert partial.get_deferred_fields() == expected.get_deferred_fields() != set()
    assert partial.priority == theirs.priority  # a deferred field is read when used, as Django does
    seen: list[object] = []

    def receiver(sender: type, instance: object, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Reservation)
    try:
        assert loaded(Reservation, attnames, row) in seen
    finally:
        post_init.disconnect(receiver, sender=Reservation)


def test_a_group_read_beside_a_known_calendar_and_agent_is_the_group_read_whole(actor: Actor) -> None:
    """A commit reads its hold's rows without the columns of the calendar and agent it already holds:
    rows on other calendars, or of another agent, still get theirs, and another workspace's stay out."""
    calendars = [engine.calendar_create(actor=actor, name=f"room {i}") for i in range(3)]
    group = engine.hold_create(
        actor=actor, calendar=calendars[1], span=half_hour(40), also_calendars=[calendars[0], calendars[2]]
    )
    hold_id = group.primary.hold_id
    other = Agent.objects.create(workspace=actor.workspace, name="ae", slug="ae", priority=1, max_priority=5)

    def described(rows: list[Reservation]) -> list[tuple[object, ...]]:
        return [
            (
                {name: value for name, value in row.__dict__.items() if name != "_state"},
                (row.calendar.pk, row.calendar.public_id, row.calendar.workspace_id),
                (row.agent.pk, row.agent.public_id),
            )
            for row in rows
        ]

    whole = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    assert len(whole) == 3
    for calendar, agent in ((calendars[1], actor.agent), (calendars[2], other)):
        assert agent is not None
        beside = reservation_group(workspace=actor.workspace, known=(calendar, agent), hold_id=hold_id)
        assert described(beside) == described(whole)
        assert [row.calendar is calendar for row in beside] == [
            row.calendar_id == calendar.pk for row in whole
        ]
        assert [row.agent is agent for row in beside] == [row.agent_id == agent.pk for row in whole]
    elsewhere = Workspace.objects.create(slug="elsewhere", name="Elsewhere")
    assert reservation_group(workspace=elsewhere, known=(calendars[1], other), hold_id=hold_id) == []
