from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class SyncConfig(AppConfig):
    name = "sync"
    verbose_name = "Upstream calendar sync"

    def ready(self) -> None:
        from bookings.events import bookings_changed

        bookings_changed.connect(_copy_upstream_soon, dispatch_uid="sync.write_behind")


def _copy_upstream_soon(sender: Any, calendar_ids: list[int], **kwargs: Any) -> None:
    """After the booking's transaction commits, ask for its calendars' upstream copies to be updated.
    No query here (it would lengthen every commit): the task looks up whether a calendar is linked.
    If the broker is down the message is dropped; the next scheduled sync writes behind anyway."""
    from django.db import transaction

    from agentcal import broker
    from sync.tasks import write_behind_for_calendar

    def publish() -> None:
        for calendar_id in calendar_ids:
            broker.enqueue(write_behind_for_calendar, (calendar_id,), fallback=lambda: None)

    transaction.on_commit(publish)
