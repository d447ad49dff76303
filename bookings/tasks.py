from __future__ import annotations

from celery import shared_task

from bookings.engine import holds_expire_lapsed


@shared_task(name="bookings.expire_lapsed_holds", ignore_result=True)
def expire_lapsed_holds() -> int:
    return holds_expire_lapsed()
