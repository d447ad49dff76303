"""Calendars as the write path reads them: their settings, from a copy this process keeps.

A hold or commit names its calendar by public id, and the engine needs its id and settings (slot
length, hold TTL, bump window, longest booking). Reading them is a round trip on every write; they
change only through a save (the calendar PATCH, the dashboard), which agentcal.local_cache sees, so
every process stops using its copy within a second of the change. The copy's `version` is NOT
current (every write moves it): the engine reads the version under the calendar's lock, never from
here, and readers that show it (GET /calendars/{id}) read the row itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentcal.db import copy_of
from agentcal.errors import NotFound
from agentcal.local_cache import LocalCache
from bookings.models import Calendar
from bookings.selectors import calendar_in_workspace

# (workspace id, calendar public id) -> the calendar as read (settings only are trusted).
calendar_settings: LocalCache[Calendar] = LocalCache("calendar settings")


def calendar_for_write(*, workspace_id: int, public_id: str) -> Calendar | None:
    """The workspace's calendar with this public id (settings from this process's copy), or None."""
    key = (workspace_id, public_id)
    found = calendar_settings.get(key)
    if found is None:
        token = calendar_settings.token()  # before the read: a change landing meanwhile leaves it unused
        found = calendar_in_workspace(workspace_id=workspace_id, public_id=public_id)
        if found is None:
            return None
        found.rules  # noqa: B018 parsed once, here: every copy handed out shares the parsed rules
        calendar_settings.put(key, found, token)
    return copy_of(found)  # the request's own: nothing it sets reaches the next request


def calendars_for_write(*, workspace_id: int, public_ids: Sequence[str]) -> list[Calendar]:
    """The workspace's calendars with these public ids, in that order (settings from this process's
    copies), or NotFound naming every one missing."""
    found = {
        pid: c for pid in public_ids if (c := calendar_for_write(workspace_id=workspace_id, public_id=pid))
    }
    missing = [pid for pid in public_ids if pid not in found]
    if missing:
        raise NotFound(f"No calendar {missing[0]} in this workspace.", missing_calendars=missing)
    return [found[pid] for pid in public_ids]
