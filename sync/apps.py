from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class SyncConfig(AppConfig):
    name = "sync"
    verbose_name = "Upstream calendar sync"

    def ready(self) -> None:
        from bookings.events import bookings_changed
        from bookings.freshness import upstream_freshness_needed
        from sync.freshness import ensure_fresh

        bookings_changed.connect(_copy_upstream_soon, dispatch_uid="sync.write_behind")
        upstream_freshness_needed.connect(ensure_fresh, dispatch_uid="sync.freshness")


def _copy_upstream_soon(sender: Any, calendar_ids: list[int], **kwargs: Any) -> None:
    """After the booking's transaction commits, ask for its calendars' upstream copies to be updated.
    No query here (it would lengthen every commit): the task looks up which calendars are linked. A
    nudge, so a busy process sends one message per interval for every calendar changed meanwhile, not
    a message per write. If the broker is down it is dropped; the next scheduled sync writes behind."""
    from agentcal import broker

    broker.nudge_on_commit("sync.write_behind_for_calendars", items=calendar_ids)
