from __future__ import annotations

from celery import shared_task

from agentcal.api.idempotency import idempotency_purge_expired


@shared_task(name="agentcal.purge_idempotency_records")
def purge_idempotency_records() -> int:
    return idempotency_purge_expired()
