"""Time as every app tells it: the database's clock decides, and responses speak UTC with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection


def server_now() -> datetime:
    """The database's `now()`: expiry, bump windows and "in the past" are decided by it, never by the
    web worker's clock (workers drift; the database is the one clock every writer shares)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        row = cursor.fetchone()
    assert row is not None
    return row[0]


def isoformat_z(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
