"""Calendar row locks: the per-calendar serialisation of writers, the fencing token, and the "now"."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from psycopg.errors import LockNotAvailable

from agentcal.db import bound_cursor
from agentcal.errors import NotFound, PreconditionFailed
from agentcal.metrics import CALENDAR_LOCK_WAIT_SECONDS
from bookings.engine.statements import AWAIT_WRITERS_SQL, LOCK_CALENDAR_SQL
from bookings.models import Calendar


class CalendarBusy(Exception):
    """Another write holds one of the calendars' locks right now (raised only with `nowait`)."""


def lock_calendars(
    lock_ids: Sequence[int], *, if_match: tuple[int, int] | None = None, nowait: bool = False
) -> tuple[datetime, dict[int, int]]:
    """Take the calendars' row locks in id order and bump their versions.

    Returns the database time read after the last lock was granted, and each calendar's new version.
    `if_match` is (calendar id, expected version): that calendar must still be at that version.
    `nowait`: raise CalendarBusy instead of queueing when another transaction holds a lock.
    """
    versions: dict[int, int] = {}
    now: datetime | None = None
    with bound_cursor() as cursor:
        for cal_id in lock_ids:
            matching = if_match is not None and if_match[0] == cal_id
            try:
                cursor.execute(
                    LOCK_CALENDAR_SQL[nowait, matching],
                    {"id": cal_id, "version": if_match[1] if if_match is not None else None},
                )
            except LockNotAvailable as exc:  # inside bound_cursor(): psycopg's error, not yet Django's
                raise CalendarBusy from exc
            row = cursor.fetchone()
            if row is None and matching:
                assert if_match is not None
                current = Calendar.objects.filter(pk=cal_id).values_list("version", flat=True).first()
                raise PreconditionFailed(
                    f"If-Match expected version {if_match[1]}; the calendar is at {current}.",
                    current_version=current,
                )
            if row is None:
                raise NotFound("The calendar no longer exists.")
            versions[cal_id], now, waited = row
            observe_lock_wait(waited)
    assert now is not None
    return now, versions


def await_writers(calendar_ids: Sequence[int]) -> None:
    """Wait until the writes in flight on these calendars have ended, without taking their place: a
    share lock conflicts with a writer's lock but not with other share locks, and in autocommit it is
    released as soon as it is granted. Every waiter wakes at once when the writer commits."""
    with bound_cursor() as cursor:
        cursor.execute(AWAIT_WRITERS_SQL, {"ids": list(calendar_ids)})
        found = cursor.fetchone()
    if found is not None and found[0] is not None:
        observe_lock_wait(found[0])


def observe_lock_wait(waited: timedelta) -> None:
    """One wait for a calendar's lock (or for the write holding it), as the database measured it: from
    the statement's arrival to the lock's grant. A lock granted at once counts as a wait of zero."""
    CALENDAR_LOCK_WAIT_SECONDS.observe(max(waited.total_seconds(), 0.0))
