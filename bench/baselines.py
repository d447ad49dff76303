"""The baselines the engine is measured against, on the same PostgreSQL, through psycopg only (no Django).

(a) naive: read free/busy, then insert into a plain table with no constraint (the race every agent
    framework writes first: it lets double bookings through under contention, and the benchmark counts them);
(b) advisory_lock: `pg_advisory_xact_lock` per calendar, then the same read-then-write;
(c) raw_insert: the insert alone, as a bare transaction: the ceiling for one write on this machine.

Their tables live in their own schema (`bench` by default), created by the benchmark and dropped after
it, never in the application's migrations.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

import psycopg
from psycopg import sql

DEFAULT_SCHEMA = "bench"
VARIANTS = ("naive", "advisory_lock", "raw_insert")
TABLES = {"naive": "naive_booking", "advisory_lock": "locked_booking", "raw_insert": "raw_booking"}
# pg_advisory_xact_lock(int4, int4): a class id of our own keeps clear of any other advisory lock user.
ADVISORY_CLASS_ID = 0x62656E  # "ben"


def schema_create(conninfo: str, schema: str = DEFAULT_SCHEMA) -> None:
    """(Re)create the baseline schema and its three tables (dropping what a crashed run left behind)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for table in TABLES.values():
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
    with psycopg.connect(conninfo, autocommit=True) as conn:
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
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(query, [list(calendar_ids)]).fetchone()
    return int(row[0]) if row else 0


class BaselineStore:
    """One connection's worth of baseline writes (a benchmark thread's, or a WSGI worker's)."""

    def __init__(self, conninfo: str, *, schema: str = DEFAULT_SCHEMA, gap_seconds: float = 0.0) -> None:
        self.conn = psycopg.connect(conninfo, autocommit=True)
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

    def reserve(self, variant: str, *, calendar_id: int, start: datetime, end: datetime, agent: str) -> int:
        """Book [start, end) on the calendar; returns 201, or 409 when the read found it busy."""
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

    def close(self) -> None:
        self.conn.close()
