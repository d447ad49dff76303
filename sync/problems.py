"""A connection's recent problems: what the API (`recent_errors`) and the dashboard show its people."""

from __future__ import annotations

from django.db import transaction

from agentcal.clock import isoformat_z, server_now
from sync.models import Connection

# How many recent problems a connection keeps for the dashboard.
RECENT_ERRORS_KEPT = 5


def note_problem(connection: Connection, error: str) -> None:
    """Keep the problem among the connection's recent ones (newest first), for the people who look."""
    with transaction.atomic():
        locked = Connection.objects.select_for_update().only("recent_errors").get(pk=connection.pk)
        entry = {"at": isoformat_z(server_now()), "error": error[:500]}
        locked.recent_errors = [entry, *locked.recent_errors][:RECENT_ERRORS_KEPT]
        locked.save(update_fields=["recent_errors"])
