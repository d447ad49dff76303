"""What one booking costs, and how many writes one calendar can take (in-process, docs/scaling.md).

One agent books fresh slots on a calendar of its own, untraced (wall time; CPU of this process and of
its PostgreSQL backend) and then traced with libpq's protocol trace (round trips, the wait for
PostgreSQL, how long each write held its calendar's lock: see `_read_trace`). Then `threads` agents
book disjoint slots on one shared calendar for `duration` seconds.

What each figure means: docs/benchmark.md, "What is measured".
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from psycopg import pq

from bench.clients import EngineSession, EngineWorker
from bench.progress import Progress
from bench.scenarios import disjoint
from bench.stats import latency_summary
from bench.targets import LocalTarget
from bookings.spans import Span

SLOT = timedelta(minutes=5)
WARM_UP_BOOKINGS = 5
# What takes a calendar's lock: a row lock on it (FOR [NO KEY] UPDATE [NOWAIT | SKIP LOCKED]), an UPDATE
# of the row (the version bump), or an advisory lock.
_LOCKING = re.compile(r"FOR (NO KEY )?UPDATE|UPDATE bookings_calendar\b|pg_advisory_xact_lock")


def cost_probe(
    target: LocalTarget,
    *,
    bookings: int,
    base: datetime,
    threads: int,
    duration: float,
    max_ops: int,
    progress: Progress,
) -> dict[str, Any]:
    session = EngineSession(agent_pk=target.agent_pks[0])
    calendar = target.calendar_create("bench cost", slot_minutes=5)
    slots = iter(range(10**9))

    def book() -> None:
        slot = next(slots)
        span = Span(base + SLOT * slot, base + SLOT * (slot + 1))
        held = session.hold(calendar, span)
        committed = session.commit(calendar, held) if held.ok else held
        if not committed.ok:
            raise RuntimeError(f"cost probe: booking a free slot failed: {committed}")

    for _ in range(WARM_UP_BOOKINGS):
        book()
    backend = _backend_cpu_reader()
    wall, cpu = [], []
    backend_before = backend() if backend else None
    with progress.phase("cost · one booking at a time", total=bookings, unit="bookings") as bar:
        for _ in range(bookings):
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            book()
            cpu.append(time.process_time() - cpu_start)
            wall.append(time.perf_counter() - wall_start)
            bar.tick(2)
            bar.advance()
    backend_cpu = (backend() - backend_before) / bookings if backend and backend_before is not None else None

    with progress.phase("cost · traced", total=bookings, unit="bookings") as bar, _protocol_trace() as trace:
        for _ in range(bookings):
            book()
            bar.tick(2)
            bar.advance()
    wire = _read_trace(trace[0], prepared=_prepared_statements())

    hot = target.calendar_create("bench hot calendar", slot_minutes=5)
    with progress.phase(f"cost · {threads} agents on one calendar", total=duration, unit="s") as bar:
        run = disjoint(
            lambda i: EngineWorker(target.engine_session(i), [hot]),
            threads=threads,
            calendars=1,
            duration=duration,
            max_ops=max_ops,
            span_for=lambda slot: Span(base + SLOT * slot, base + SLOT * (slot + 1)),
            bar=bar,
        )
    session.close()
    outcomes = run.recorder.outcomes
    lock_hold = latency_summary(wire.lock_holds)
    ceiling = 1000 / lock_hold["p50"] if wire.lock_holds and lock_hold["p50"] > 0 else None
    writes_per_second = len(outcomes) / run.wall_seconds if run.wall_seconds > 0 else None
    return {
        "bookings": bookings,
        "writes_per_booking": 2,
        "wall_ms_per_booking": latency_summary(wall),
        "app_cpu_ms_per_booking": 1000 * sum(cpu) / bookings,
        "postgres_cpu_ms_per_booking": None if backend_cpu is None else 1000 * backend_cpu,
        "postgres_cpu_note": None if backend else _why_no_backend_cpu(),
        "round_trips_per_booking": wire.round_trips / bookings,
        "postgres_wait_ms_per_booking": 1000 * wire.wait_seconds / bookings,
        "lock_hold_ms": lock_hold,
        "calendar_ceiling_writes_per_second": ceiling,
        "hot_calendar": {
            "threads": threads,
            "wall_seconds": run.wall_seconds,
            "writes": len(outcomes),
            "writes_per_second": writes_per_second,
            "bookings_per_second": run.recorder.completed_bookings / run.wall_seconds
            if run.wall_seconds > 0
            else None,
            "errors": sum(1 for o in outcomes if not o.ok),
            "latency_ms": latency_summary(o.seconds for o in outcomes),
            "share_of_ceiling": writes_per_second / ceiling if writes_per_second and ceiling else None,
        },
    }


class _Wire:
    def __init__(self) -> None:
        self.round_trips = 0
        self.wait_seconds = 0.0
        self.lock_holds: list[float] = []


def _prepared_statements() -> dict[str, str]:
    """This connection's prepared statements by name: a statement prepared before the trace appears in it
    only by name (a Bind with no Parse)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        return dict(cursor.fetchall())


def _read_trace(text: str, *, prepared: Mapping[str, str] | None = None) -> _Wire:
    """Round trips, time waiting for answers, and lock hold times, from a PQtrace with timestamps.

    A lock taken inside a transaction is held from the locking statement's answer to the answer that
    ends the transaction (ReadyForQuery back to idle). A locking statement sent on its own (autocommit:
    the statement is the transaction) holds it at most from the request's first byte to its answer."""
    wire = _Wire()
    statements = dict(prepared or {})  # prepared statements' text by name
    request_started: float | None = None  # the current request's first message
    sent_at: float | None = None  # its last message
    locking = failed = False  # the current request takes a calendar's lock; it failed
    locked_at: float | None = None  # inside a transaction that holds a lock, since when
    for stamp, direction, kind, body in _messages(text):
        if direction == "F":
            request_started = stamp if request_started is None else request_started
            sent_at = stamp
            if kind == "Parse":
                name, statement = parsed_statement(body)
                if name:  # being prepared
                    statements[name] = statement
            elif kind == "Bind":  # a statement prepared earlier is sent by name alone
                body = statements.get(bound_statement_name(body), "")
            locking = locking or (kind in ("Query", "Parse", "Bind") and bool(_LOCKING.search(body)))
        elif kind == "ErrorResponse":
            failed = True
        elif kind == "ReadyForQuery":
            wire.round_trips += 1
            if sent_at is not None:
                wire.wait_seconds += stamp - sent_at
            idle = body.strip() == "I"
            if locked_at is not None and idle:  # COMMIT (or ROLLBACK) answered: the lock is free
                wire.lock_holds.append(stamp - locked_at)
                locked_at = None
            elif locking and not failed and locked_at is None:
                if not idle:
                    locked_at = stamp
                elif request_started is not None:
                    wire.lock_holds.append(stamp - request_started)
            if idle:
                locked_at = None
            request_started = sent_at = None
            locking = failed = False
    return wire


def parsed_statement(body: str) -> tuple[str, str]:
    """A traced Parse message's statement name ('' when unnamed) and text (followed by its parameter
    types): `"<name>" "<statement>" <types>`."""
    _, name, _, statement = body.split('"', 3)
    return name, statement


def bound_statement_name(body: str) -> str:
    """A traced Bind message's statement name ('' when unnamed): `"<portal>" "<statement name>" …`."""
    parts = body.split('"', 4)
    return parts[3] if len(parts) > 3 else ""


# A message's first line: timestamp, direction (F: to the server, B: from it), length, type, then its body,
# which continues on the following lines when a statement spans several.
_MESSAGE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\t([FB])\t\d+\t(\w+)\t?(.*)$")


def _messages(text: str) -> Iterator[tuple[float, str, str, str]]:
    current: list[str] | None = None
    for line in text.splitlines():
        match = _MESSAGE.match(line)
        if match is None:
            if current is not None:
                current[3] += "\n" + line
            continue
        if current is not None:
            yield _seconds(current[0]), current[1], current[2], current[3]
        current = list(match.groups())
    if current is not None:
        yield _seconds(current[0]), current[1], current[2], current[3]


def _seconds(stamp: str) -> float:
    # libpq writes local time; only differences are used, so which zone is immaterial.
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()


@contextmanager
def _protocol_trace() -> Iterator[list[str]]:
    """PQtrace on this thread's Django connection; the trace's text is in the list after the block."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    handle, name = tempfile.mkstemp(prefix="agentcal-pqtrace-")
    text: list[str] = []
    try:
        pgconn.trace(handle)
        pgconn.set_trace_flags(pq.Trace.REGRESS_MODE)  # keeps the timestamps, hides oids
        yield text
    finally:
        pgconn.untrace()  # flushes what libpq buffered
        os.close(handle)
        text.append(Path(name).read_text(errors="replace"))
        Path(name).unlink(missing_ok=True)


def _backend_cpu_reader() -> Callable[[], float] | None:
    """A function returning the CPU seconds used so far by this connection's PostgreSQL backend, or None
    when that cannot be read (PostgreSQL elsewhere, or a pooler between us and the backend)."""
    if getattr(settings, "DB_TRANSACTION_POOLER", False):
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = int(cursor.fetchone()[0])
    stat = Path(f"/proc/{pid}/stat")
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return None
        stat.read_text()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime (fields 14 and 15)

    return read


def _why_no_backend_cpu() -> str:
    if getattr(settings, "DB_TRANSACTION_POOLER", False):
        return "a transaction pooler hands each transaction to any backend"
    return "the PostgreSQL backend is not a process on this machine"
