"""The expiry sweep (Celery beat, every 30 s) and the repair of interrupted decisions."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now

from approvals.models import Approval
from approvals.services import approvals_expire_due, approvals_finish_interrupted
from tests.approvals.helpers import gated_hold
from tests.helpers import audit_rows
from webhooks.models import OutboxEvent

pytestmark = pytest.mark.slow


def _time_is_up(approval_id: str) -> None:
    # 60 s is the shortest expiry an agent may ask for; move the approval into the past instead.
    Approval.objects.filter(public_id=approval_id).update(
        created_at=Now() - timedelta(minutes=5), expires_at=Now() - timedelta(seconds=1)
    )


@pytest.mark.concurrency
def test_two_sweeps_at_once_expire_an_approval_exactly_once_and_release_its_hold(sdr):
    calendar, hold, approval = gated_hold(sdr, expires_in_seconds=60)
    _time_is_up(approval["id"])
    barrier = threading.Barrier(2)
    counts: list[int] = []

    def sweep():
        try:
            barrier.wait()
            counts.append(approvals_expire_due())
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(counts) == [0, 1]
    row = Approval.objects.get(public_id=approval["id"])
    assert row.status == "expired" and row.decided_at == row.expires_at and row.decided_by_email == ""
    assert sdr.client.get(f"/approvals/{approval['id']}").json()["status"] == "expired"
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "released"
    assert len(audit_rows(event_type="approval.expired")) == 1
    (event,) = OutboxEvent.objects.filter(event_type="approval.expired")
    assert event.payload["approval"]["status"] == "expired"
    assert approvals_expire_due() == 0


def test_the_sweep_leaves_approvals_with_time_left_alone(sdr):
    calendar, hold, approval = gated_hold(sdr, expires_in_seconds=60)
    assert approvals_expire_due() == 0
    assert Approval.objects.get(public_id=approval["id"]).status == "pending"
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "held"


def test_an_approval_whose_hold_commit_was_interrupted_is_finished_by_the_sweep(sdr, owner):
    calendar, hold, approval = gated_hold(sdr)
    # As if the process died right after the decision committed, before the hold was committed.
    Approval.objects.filter(public_id=approval["id"]).update(
        status="approved",
        decided_at=Now() - timedelta(minutes=2),
        decided_by=owner,
        decided_by_email=owner.email,
    )
    assert approvals_finish_interrupted() == 1
    row = Approval.objects.get(public_id=approval["id"])
    assert row.booking_id == "bk_" + hold["id"].removeprefix("hld_")
    assert sdr.client.get(f"/bookings/{row.booking_id}").json()["status"] == "committed"
    (event,) = OutboxEvent.objects.filter(event_type="approval.approved")
    assert event.payload["approval"]["booking_id"] == row.booking_id
    assert approvals_finish_interrupted() == 0  # settled once


def test_a_denied_approval_whose_hold_release_was_interrupted_is_finished_by_the_sweep(sdr, owner):
    calendar, hold, approval = gated_hold(sdr)
    Approval.objects.filter(public_id=approval["id"]).update(
        status="denied",
        decided_at=Now() - timedelta(minutes=2),
        decided_by=owner,
        decided_by_email=owner.email,
    )
    assert approvals_finish_interrupted() == 1
    assert sdr.client.get(f"/holds/{hold['id']}").json()["status"] == "released"
    assert approvals_finish_interrupted() == 0
