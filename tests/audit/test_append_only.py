"""The database itself refuses UPDATE and DELETE on audit rows (trigger from migration 0002)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditRecord, Outcome
from audit.services import audit_record
from tests.audit.aged_rows import insert_aged_audit_row
from workspaces.models import Workspace


@pytest.fixture
def workspace(db):
    return Workspace.objects.create(slug="acme", name="Acme")


@pytest.fixture
def row(workspace):
    return audit_record(
        event_type="calendar.hold.created",
        outcome=Outcome.SUCCESS,
        actor=None,
        workspace_id=workspace.pk,
        calendar_public_id="cal_x",
        failure_reason="",
    )


def run_sql(sql: str, params: list) -> None:
    # The refused statement aborts the transaction; atomic() rolls it back to the savepoint.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_the_database_refuses_update(row):
    with pytest.raises(DatabaseError, match="append-only"):
        run_sql(
            "UPDATE audit_auditrecord SET outcome = 'rejected', failure_reason = 'forged' WHERE id = %s",
            [row.pk],
        )

    row.refresh_from_db()
    assert (row.outcome, row.failure_reason) == ("success", "")


def test_the_database_refuses_delete(row):
    with pytest.raises(DatabaseError, match="append-only"):
        run_sql("DELETE FROM audit_auditrecord WHERE id = %s", [row.pk])

    assert AuditRecord.objects.filter(pk=row.pk).exists()


def test_the_orm_cannot_update_or_delete_either(row):
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditRecord.objects.filter(pk=row.pk).update(event_type="calendar.hold.released")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditRecord.objects.filter(pk=row.pk).delete()

    row.refresh_from_db()
    assert row.event_type == "calendar.hold.created"


def test_the_purge_flag_does_not_allow_deleting_recent_rows(row):
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET LOCAL agentcal.audit_purge = 'on'")
        cursor.execute("DELETE FROM audit_auditrecord WHERE id = %s", [row.pk])

    assert AuditRecord.objects.filter(pk=row.pk).exists()


def test_an_old_row_cannot_be_deleted_without_the_purge_flag(workspace):
    old = insert_aged_audit_row(workspace_id=workspace.pk, age_days=400)

    with pytest.raises(DatabaseError, match="append-only"):
        run_sql("DELETE FROM audit_auditrecord WHERE public_id = %s", [old])

    assert AuditRecord.objects.filter(public_id=old).exists()


def test_the_purge_flag_cannot_be_used_to_rewrite_old_rows(workspace):
    old = insert_aged_audit_row(workspace_id=workspace.pk, age_days=400)

    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET LOCAL agentcal.audit_purge = 'on'")
        cursor.execute("UPDATE audit_auditrecord SET event_type = 'x' WHERE public_id = %s", [old])

    assert AuditRecord.objects.get(public_id=old).event_type == "calendar.hold.created"


def test_rows_can_still_be_inserted(workspace):
    audit_record(
        event_type="calendar.created", outcome=Outcome.SUCCESS, actor=None, workspace_id=workspace.pk
    )
    insert_aged_audit_row(workspace_id=workspace.pk, age_days=1)
    assert AuditRecord.objects.filter(workspace_id=workspace.pk).count() == 2
