"""Django's PostgreSQL backend, with a per-request health check that needs no round trip, and
connections whose prepared statements keep one plan.

Instead of CONN_HEALTH_CHECKS' `SELECT 1` before every request, it trusts psycopg's own `closed` and
`broken` and one zero-timeout `poll()` of the socket (a server that went away has left its FATAL
message or end of stream there). A connection idle longer than DB_HEALTH_CHECK_IDLE_SECONDS still gets
the real `SELECT 1`, and any doubt falls back to Django's check.

Why and the measurements: docs/performance-notes.md, "The health check".
"""

from __future__ import annotations

import select
import time
from typing import Any

from django.conf import settings
from django.db.backends.postgresql import base
from psycopg import pq

# A statement the engine has prepared (agentcal.db) keeps its one plan, made again only when what it
# reads changes (an ANALYZE, a migration). Under PostgreSQL's default the server plans it anew whenever
# the statistics make a plan for the values at hand look cheaper, and planning the one-statement write
# costs it more than running it (docs/performance-notes.md, "Planned once"); Django's own queries are
# never prepared. Asked for when connecting, after any `options` of DATABASE_URL. A transaction pooler
# refuses startup options; behind one, `ALTER ROLE … SET plan_cache_mode = force_generic_plan`.
KEEP_ONE_PLAN = "-c plan_cache_mode=force_generic_plan"


class DatabaseWrapper(base.DatabaseWrapper):
    # time.monotonic() of the last health check this connection passed (cheap or real).
    _checked_at = 0.0

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        if not settings.DB_TRANSACTION_POOLER:
            params["options"] = f"{params.get('options', '')} {KEEP_ONE_PLAN}".strip()
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        self._checked_at = time.monotonic()
        return connection

    health_check_done: bool  # Django's, set per request (untyped in django-stubs)

    def close_if_health_check_failed(self) -> None:
        enabled = self.settings_dict["CONN_HEALTH_CHECKS"]
        if self.pool or self.connection is None or not enabled or self.health_check_done:
            super().close_if_health_check_failed()
            return
        now = time.monotonic()
        if now - self._checked_at < settings.DB_HEALTH_CHECK_IDLE_SECONDS and self._looks_alive():
            self.health_check_done = True
        else:
            super().close_if_health_check_failed()  # SELECT 1; closes the connection if it fails
        if self.connection is not None:
            self._checked_at = now

    def _looks_alive(self) -> bool:
        """True unless psycopg knows the connection failed or the server said something while it was
        idle (nothing is expected between requests; see the module docstring)."""
        raw = self.connection
        if raw.closed or raw.broken:
            return False
        if raw.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        try:
            poller = select.poll()  # not select(): it fails on descriptors above 1023
            poller.register(raw.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False
