from __future__ import annotations

from celery import shared_task

from audit.services import audit_purge_expired


@shared_task(name="audit.purge_expired")
def purge_expired_audit_records() -> int:
    return audit_purge_expired()
