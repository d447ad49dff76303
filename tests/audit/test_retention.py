"""audit_purge_expired deletes only rows past their workspace's retention window."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditRecord, Outcome
from audit.services import audit_purge_expired, audit_record
from tests.audit.aged_rows import insert_aged_audit_row
from workspaces.models import Workspace


@pytest.fixture
def acme(transactional_db):
    return Workspace.objects.create(slug="acme", name="Acme")  # default tier: 90 days


@pytest.fixture
def globex(transactional_db):
    return Workspace.objects.create(slug="globex", name="Globex", audit_retention_days=500)


def surviving(*public_ids: str) -> set[str]:
    return set(AuditRecord.objects.filter(public_id__in=public_ids).values_list("public_id", flat=True))


def test_the_purge_deletes_only_rows_older_than_the_workspaces_window(acme, globex):
    acme_ancient = insert_aged_audit_row(workspace_id=acme.pk, age_days=400)
    acme_just_past = insert_aged_audit_row(workspace_id=acme.pk, age_days=91)
    acme_kept = insert_aged_audit_row(workspace_id=acme.pk, age_days=89)
    acme_today = audit_record(
        event_type="calendar.created", outcome=Outcome.SUCCESS, actor=None, workspace_id=acme.pk
    ).public_id
    globex_kept = insert_aged_audit_row(workspace_id=globex.pk, age_days=400)
    globex_ancient = insert_aged_audit_row(workspace_id=globex.pk, age_days=600)

    deleted = audit_purge_expired()

    assert deleted == 3
    everything = (acme_ancient, acme_just_past, acme_kept, acme_today, globex_kept, globex_ancient)
    assert surviving(*everything) == {acme_kept, acme_today, globex_kept}


def test_the_purge_follows_a_changed_tier(acme):
    row = insert_aged_audit_row(workspace_id=acme.pk, age_days=40)
    assert audit_purge_expired() == 0

    acme.audit_retention_days = 30
    acme.save(update_fields=["audit_retention_days"])

    assert audit_purge_expired() == 1
    assert surviving(row) == set()


def test_the_purge_is_a_no_op_when_nothing_is_old(acme):
    insert_aged_audit_row(workspace_id=acme.pk, age_days=1)
    assert audit_purge_expired() == 0
    assert AuditRecord.objects.count() == 1


def test_the_purge_flag_does_not_outlive_the_purge(acme):
    old = insert_aged_audit_row(workspace_id=acme.pk, age_days=400)
    insert_aged_audit_row(workspace_id=acme.pk, age_days=500)
    assert audit_purge_expired() == 2
    # SET LOCAL ended with the purge's transaction: on this same connection, deletes are refused again.
    older = insert_aged_audit_row(workspace_id=acme.pk, age_days=400)

    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("DELETE FROM audit_auditrecord WHERE public_id = %s", [older])

    assert surviving(old, older) == {older}
