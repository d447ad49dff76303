"""The baselines the engine is measured against, on the same PostgreSQL, through psycopg only (no Django).

(a) naive read-then-write, with no constraint (it lets double bookings through; they are counted);
(b) advisory_lock: `pg_advisory_xact_lock` per calendar, then the same read-then-write;
(c) raw_insert: the insert alone, the ceiling for one write on this machine;
(d) guarded: what one engine hold writes, in bare SQL, into copies of the application's tables.

Their tables live in their own schema (`bench` by default), never in the application's migrations.
Why each, and how they are run: docs/benchmark.md, "What is measured".
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

DEFAULT_SCHEMA = "bench"
VARIANTS = ("naive", "advisory_lock", "raw_insert", "guarded")
TABLES = {
    "naive": "naive_booking",
    "advisory_lock": "locked_booking",
    "raw_insert": "raw_booking",
    "guarded": "guarded_booking",
}
# (d)'s copies of the application's tables: (bench table, application table). LIKE … INCLUDING ALL
# copies columns, defaults, indexes and constraints (the exclusion constraint too), not foreign keys.
GUARDED_COPIES = (
    ("guarded_booking", "bookings_reservation"),
    ("guarded_audit", "audit_auditrecord"),
    ("guarded_outbox", "webhooks_outboxevent"),
)
# pg_advisory_xact_lock(int4, int4): a class id of our own keeps clear of any other advisory lock user.
ADVISORY_CLASS_ID = 0x62656E  # "ben"
PSYCOPG_PREPARE_THRESHOLD = 5


def schema_create(conninfo: str, schema: str = DEFAULT_SCHEMA) -> None:
    """(Re)create the baseline schema and its three tables (dropping what a crashed run left behind)."""
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for table, source in GUARDED_COPIES:
            conn.execute(
                sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                    sql.Identifier(schema, table), sql.Identifier(source)
                )
            )
        conn.execute(
            sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY, version bigint NOT NULL DEFAULT 0)").format(
                sql.Identifier(schema, "guarded_calendar")
            )
        )
        for variant, table in TABLES.items():
            if variant == "guarded":
                continue
            # Deliberately no exclusion constraint: the point of (a) is what happens without one. The
            # index serves the free/busy read of (a) and (b) like reservation_cal_start serves the engine.
            conn.execute(
                sql.SQL(
                    """CREATE TABLE {table} (
                           id bigserial PRIMARY KEY,
                           calendar_id integer NOT NULL,
                           start_time timestamptz NOT NULL,
                           end_time timestamptz NOT NULL,
                           agent text NOT NULL,
                           created_at timestamptz NOT NULL DEFAULT now())"""
                ).format(table=sql.Identifier(schema, table))
            )
            conn.execute(
                sql.SQL("CREATE INDEX ON {} (calendar_id, start_time)").format(sql.Identifier(schema, table))
            )


def schema_drop(conninfo: str, schema: str = DEFAULT_SCHEMA) -> None:
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def overlapping_pairs(
    conninfo: str, variant: str, calendar_ids: Sequence[int], schema: str = DEFAULT_SCHEMA
) -> int:
    """Double bookings in a baseline's table: pairs of rows overlapping on one calendar.

    Of two overlapping rows, the later-starting one starts inside the other, so the join looks only at
    rows starting inside each row: an index range scan on (calendar_id, start_time), not all pairs.
    """
    query = sql.SQL(
        """SELECT count(*) FROM {table} a JOIN {table} b
               ON b.calendar_id = a.calendar_id
              AND b.start_time >= a.start_time AND b.start_time < a.end_time
              AND (b.start_time > a.start_time OR b.id > a.id)
            WHERE a.calendar_id = ANY(%s)"""
    ).format(table=sql.Identifier(schema, TABLES[variant]))
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        row = conn.execute(query, [list(calendar_ids)]).fetchone()
    return int(row[0]) if row else 0


class BaselineStore:
    """One connection's worth of baseline writes (a benchmark thread's, or a WSGI worker's)."""

    def __init__(
        self, conninfo: str, *, schema: str = DEFAULT_SCHEMA, gap_seconds: float = 0.0, prepare: bool = True
    ) -> None:
        # psycopg's default: a statement is prepared on its 5th execution (None: never).
        threshold = PSYCOPG_PREPARE_THRESHOLD if prepare else None
        self.conn = psycopg.connect(conninfo, autocommit=True, prepare_threshold=threshold)
        # (d) prepares its statements on first use (None: as the connection's threshold says).
        self.prepare: bool | None = prepare or None
        # Time between the free/busy read and the insert: 0 in the published run; tests widen the race
        # window with it to prove that the overlap check can find double bookings.
        self.gap_seconds = gap_seconds
        self._busy = {
            v: sql.SQL(
                "SELECT 1 FROM {} WHERE calendar_id = %s AND start_time < %s AND end_time > %s LIMIT 1"
            ).format(sql.Identifier(schema, t))
            for v, t in TABLES.items()
        }
        self._insert = {
            v: sql.SQL(
                "INSERT INTO {} (calendar_id, start_time, end_time, agent) VALUES (%s, %s, %s, %s)"
            ).format(sql.Identifier(schema, t))
            for v, t in TABLES.items()
        }
        names = {name: sql.Identifier(schema, name) for name in ("guarded_calendar", *dict(GUARDED_COPIES))}
        self._guarded_lock = sql.SQL(
            "UPDATE {} SET version = version + 1 WHERE id = %s RETURNING version, clock_timestamp()"
        ).format(names["guarded_calendar"])
        self._guarded_calendar = sql.SQL("INSERT INTO {} (id) VALUES (%s) ON CONFLICT DO NOTHING").format(
            names["guarded_calendar"]
        )
        self._guarded_busy = sql.SQL(_GUARDED_BUSY).format(booking=names["guarded_booking"])
        self._guarded_insert = sql.SQL(_GUARDED_INSERT).format(
            booking=names["guarded_booking"], audit=names["guarded_audit"], outbox=names["guarded_outbox"]
        )

    def reserve(self, variant: str, *, calendar_id: int, start: datetime, end: datetime, agent: str) -> int:
        """Book [start, end) on the calendar; returns 201, or 409 when the read found it busy."""
        if variant == "guarded":
            return self._reserve_guarded(calendar_id=calendar_id, start=start, end=end, agent=agent)
        with self.conn.transaction():
            if variant == "advisory_lock":
                # Serialises this calendar's writers until the transaction ends, like the engine's
                # calendar row lock; the read below then sees every committed booking.
                self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ADVISORY_CLASS_ID, calendar_id])
            if variant != "raw_insert":
                busy = self.conn.execute(self._busy[variant], [calendar_id, end, start])
                if busy.fetchone() is not None:
                    return 409
                if self.gap_seconds:
                    time.sleep(self.gap_seconds)
            self.conn.execute(self._insert[variant], [calendar_id, start, end, agent])
        return 201

    def _reserve_guarded(self, *, calendar_id: int, start: datetime, end: datetime, agent: str) -> int:
        """(d): the engine's hold, minus Django: lock, look, then one INSERT statement for three rows."""
        with self.conn.transaction():
            locked = self.conn.execute(self._guarded_lock, [calendar_id], prepare=self.prepare).fetchone()
            if locked is None:  # first write on this calendar
                self.conn.execute(self._guarded_calendar, [calendar_id])
                locked = self.conn.execute(self._guarded_lock, [calendar_id], prepare=self.prepare).fetchone()
            assert locked is not None
            version, now = locked
            look = {"calendar": calendar_id, "start": start, "end": end, "now": now}
            if self.conn.execute(self._guarded_busy, look, prepare=self.prepare).fetchone() is not None:
                return 409
            hold_id = "hld_" + secrets.token_hex(10)
            payload = {
                "hold": {
                    "id": hold_id,
                    "hold_id": hold_id,
                    "booking_id": None,
                    "status": "held",
                    "calendar": f"cal_{calendar_id}",
                    "also_calendars": [],
                    "start_time": start.isoformat(),
                    "end_time": end.isoformat(),
                    "priority": 100,
                    "fencing_token": version,
                    "agent_id": agent,
                    "title": "",
                    "metadata": {},
                    "expires_at": (now + HOLD_TTL).isoformat(),
                    "committed_at": None,
                    "bump_window_ends_at": None,
                    "ended_at": None,
                }
            }
            self.conn.execute(
                self._guarded_insert,
                {
                    "hold_id": hold_id,
                    "calendar": calendar_id,
                    "start": start,
                    "end": end,
                    "token_hash": secrets.token_hex(32),
                    "version": version,
                    "now": now,
                    "expires": now + HOLD_TTL,
                    "audit_id": "aud_" + secrets.token_hex(10),
                    "event_id": "evt_" + secrets.token_hex(10),
                    "agent": agent,
                    "details": Jsonb({"priority": 100, "also_calendars": [], "displaced": []}),
                    "payload": Jsonb(payload),
                },
                prepare=self.prepare,
            )
        return 201

    def close(self) -> None:
        self.conn.close()


HOLD_TTL = timedelta(seconds=30)

# The engine's look under the lock (_CLEAR_THE_WAY_SQL without the lazy expiry, which has nothing to do
# here): live rows overlapping the span, read through the (calendar_id, start_time) index.
_GUARDED_BUSY = """
SELECT 1 FROM {booking}
 WHERE calendar_id = %(calendar)s AND status IN ('held', 'committed')
   AND start_time < %(end)s AND start_time > %(start)s - interval '7 days' AND end_time > %(start)s
   AND NOT (status = 'held' AND expires_at <= %(now)s)
 LIMIT 1
"""

# The rows one engine hold writes, in one statement as the engine sends them (agentcal.db.InsertBatch).
_GUARDED_INSERT = """
WITH audit AS (
    INSERT INTO {audit} (public_id, event_type, outcome, workspace_id, agent_public_id, actor_user,
                         auth_key_prefix, calendar_public_id, reservation_public_id, requested_start,
                         requested_end, http_status, failure_reason, conflict_details, fencing_token,
                         request_id, details)
    VALUES (%(audit_id)s, 'hold.created', 'success', 1, %(agent)s, '', 'ak_bench', 'cal_bench',
            %(hold_id)s, %(start)s, %(end)s, NULL, '', NULL, %(version)s, '', %(details)s)
), outbox AS (
    INSERT INTO {outbox} (public_id, workspace_id, agent_id, event_type, payload)
    VALUES (%(event_id)s, 1, 1, 'hold.created', %(payload)s)
)
INSERT INTO {booking} (hold_id, booking_id, calendar_id, agent_id, is_primary, status, priority,
                       start_time, end_time, hold_token_hash, fencing_token, version, title, attendees,
                       metadata, created_at, expires_at, committed_at, bump_window_ends_at, ended_at,
                       awaiting_approval, displaced_by_id)
VALUES (%(hold_id)s, NULL, %(calendar)s, 1, true, 'held', 100, %(start)s, %(end)s, %(token_hash)s,
        %(version)s, 1, '', '[]', '{{}}', %(now)s, %(expires)s, NULL, NULL, NULL, NULL, NULL)
"""
