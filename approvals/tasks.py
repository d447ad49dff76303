"""Celery tasks: thin wrappers around approvals.services."""

from __future__ import annotations

from celery import shared_task

from approvals.notifications import approval_notify_owners
from approvals.services import approvals_expire_due, approvals_finish_interrupted


@shared_task(name="approvals.expire_due", ignore_result=True)
def expire_due() -> int:
    """Every 30 s (beat): expire pending approvals whose time is up, then finish any decision a crash
    interrupted between its transactions."""
    return approvals_expire_due() + approvals_finish_interrupted()


@shared_task(name="approvals.notify_owners", ignore_result=True)
def notify_owners(approval_pk: int) -> None:
    approval_notify_owners(approval_pk)
