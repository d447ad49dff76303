"""The engine's hand-written SQL, built from the shared fragments of bookings/sql.py (what "live",
"lapsed", "bumpable" and "overlaps" mean is written there, once).

Hand-written because these run on every write: the ORM spent longer compiling them than the database
spent running them, and one statement can do what the ORM would need several round trips for.
"""

from __future__ import annotations

from bookings.selectors import RESERVATION_ROW_COLUMNS, RESERVATION_ROW_JOINS, RESERVATION_ROW_WIDTH
from bookings.sql import NOW_PARAM, bumpable, each_calendar, lapsed_hold, live, live_hold, overlaps, unindexed

# --- Calendar locks ----------------------------------------------------------------------------------


def _lock_calendar(*, nowait: bool, matching: bool) -> str:
    target = (
        "(SELECT id FROM bookings_calendar WHERE id = %(id)s FOR NO KEY UPDATE NOWAIT)"
        if nowait
        else "%(id)s"
    )
    return (
        f"UPDATE bookings_calendar SET version = version + 1 WHERE id = {target}"
        + (" AND version = %(version)s" if matching else "")
        + " RETURNING version, clock_timestamp(), clock_timestamp() - statement_timestamp()"
    )


# One calendar's lock and version bump; the timestamp is read after the lock was granted, and how long
# the statement waited for it (the lock-wait metric; measured by the database, no round trip of its
# own). Keyed by (nowait, the If-Match version is checked on this calendar).
LOCK_CALENDAR_SQL = {
    (nowait, matching): _lock_calendar(nowait=nowait, matching=matching)
    for nowait in (False, True)
    for matching in (False, True)
}

# A share lock conflicts with a writer's lock but not with other share locks (see await_writers()).
# The outer SELECT reads the clock after each row's lock was granted: how long the wait was.
AWAIT_WRITERS_SQL = (
    "SELECT max(clock_timestamp()) - statement_timestamp()"
    " FROM (SELECT id FROM bookings_calendar WHERE id = ANY(%(ids)s) ORDER BY id FOR SHARE) AS writers"
)

# --- The write path ----------------------------------------------------------------------------------


def _taken_over(alias: str, *, now: str) -> str:
    """The takeover rule (Python twin: rules.may_take_over): a strictly greater priority, and a row
    still bumpable."""
    return f"{alias}.priority < %(priority)s AND {bumpable(alias, now=now)}"


# An upstream busy block in the way (the first by start): what a 409 says about it. Nothing takes a
# block over, so any one refuses the write.
_UPSTREAM_BLOCKER = f"""
SELECT b.start_time, b.end_time, b.source, b.calendar_id, c.public_id, c.slot_minutes
  FROM bookings_busyblock b JOIN bookings_calendar c ON c.id = b.calendar_id
 WHERE b.calendar_id = ANY(%(calendars)s) AND {overlaps("b")}
 ORDER BY b.start_time
 LIMIT 1
"""


def span_empty(*, calendar: str) -> str:
    """Nothing at all on the calendar (SQL, its id) in the span: no reservation held (even a lapsed
    hold) or committed, and no upstream busy block. The one-statement write takes only such a span;
    anything else is looked at under the lock, on the general path. (By one id: `= ANY(ids)` made the
    one statement's generic plan slower.)"""
    return (
        f"NOT EXISTS (SELECT 1 FROM bookings_reservation r WHERE r.calendar_id = {calendar}"
        f" AND r.status IN ('held', 'committed') AND {overlaps('r')})"
        f" AND NOT EXISTS (SELECT 1 FROM bookings_busyblock b WHERE b.calendar_id = {calendar}"
        f" AND {overlaps('b')})"
    )


# The types of _UPSTREAM_BLOCKER's columns (as read by rules.upstream_blocker_from()), for the typed
# NULLs that pad reservation rows in CLEAR_THE_WAY_SQL's UNION.
_UPSTREAM_BLOCKER_TYPES = ("timestamptz", "timestamptz", "text", "bigint", "text", "integer")

# The first live reservation in the way on calendar k.id that the caller could not take over.
_FIRST_BLOCKER_ON_K = f"""
SELECT r.* FROM bookings_reservation r
 WHERE r.calendar_id = k.id AND {live("r", now="now()")} AND {overlaps("r")}
   AND NOT ({_taken_over("r", now="now()")})
 ORDER BY r.start_time
 LIMIT 1
"""

# The pre-check in one round trip: the database's now, the first live reservation in the way that the
# caller could not take over (not lapsed, and not what rules.may_take_over allows), and the first
# upstream busy block in the way, with what a 409 says about them. One statement, so the blocker it
# describes is the one it found (no second read).
PRECHECK_SQL = f"""
SELECT now(), b.id, b.status, b.priority, b.start_time, b.end_time, b.expires_at, b.bump_window_ends_at,
       b.calendar_id, b.cal_public_id, b.slot_minutes, b.agent_id, b.agent_public_id, u.*
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (
      SELECT r.id, r.status, r.priority, r.start_time, r.end_time, r.expires_at, r.bump_window_ends_at,
             r.calendar_id, c.public_id AS cal_public_id, c.slot_minutes, r.agent_id,
             a.public_id AS agent_public_id
        FROM {each_calendar(_FIRST_BLOCKER_ON_K, alias="r")}
        JOIN bookings_calendar c ON c.id = r.calendar_id
        JOIN workspaces_agent a ON a.id = r.agent_id
       ORDER BY r.start_time
       LIMIT 1
  ) AS b ON true
  LEFT JOIN LATERAL ({_UPSTREAM_BLOCKER}) AS u ON true
"""


def _expire_lapsed_cte(*, overlapping: bool) -> str:
    """Whole groups of lapsed holds overlapping the span (or anywhere on the calendars, for the sweep)
    move to 'expired': row locks taken in id order (like TRANSITION_SQL), status and expiry checked
    again on the locked rows. As a CTE `expired` whose rows the statement reads back with their
    calendar and agent."""
    if overlapping:
        in_span = f"""
SELECT hold_id FROM bookings_reservation
 WHERE calendar_id = k.id AND {lapsed_hold("", now=NOW_PARAM)} AND {overlaps("")}
"""
        lapsed_holds = f"SELECT x.hold_id FROM {each_calendar(in_span, alias='x')}"
    else:
        # By the groups' primary rows, through the index of held primary rows (a group's rows lapse
        # together): a calendar's history is never read. The calendar is a filter, never the index.
        lapsed_holds = (
            "SELECT hold_id FROM bookings_reservation"
            f" WHERE is_primary AND {lapsed_hold('', now=NOW_PARAM)}"
            f" AND {unindexed('calendar_id = ANY(%(calendars)s)')}"
        )
    # The lapsed groups are found first and their rows by hold id (an array, so the planner cannot turn
    # the look-up around into a scan of the table), then updated by id: their status, checked on the
    # locked row, must not lead the planner to the exclusion constraint's index.
    still_lapsed = unindexed(lapsed_hold("", now=NOW_PARAM))
    return f"""
WITH expired AS (
    UPDATE bookings_reservation SET status = 'expired', version = version + 1, ended_at = {NOW_PARAM}
     WHERE id = ANY(ARRAY(SELECT id FROM bookings_reservation
                           WHERE hold_id = ANY(ARRAY({lapsed_holds})) AND {still_lapsed}
                           ORDER BY id FOR UPDATE))
       AND {still_lapsed}
    RETURNING *)
"""


# The sweep: every lapsed hold on the calendars.
EXPIRE_LAPSED_SQL = (
    _expire_lapsed_cte(overlapping=False)
    + f"SELECT {RESERVATION_ROW_COLUMNS} FROM expired r {RESERVATION_ROW_JOINS}"
)

# The write path's look under the lock, in one round trip: expire the lapsed holds in the span, and
# read what is in the way: the live rows (whole rows, with calendar and agent, for a 409 or a
# takeover) and the first upstream busy block. Each row starts with its kind ('expired', 'live',
# 'upstream'); reservation rows then carry RESERVATION_ROW_COLUMNS, the block row the columns of
# _UPSTREAM_BLOCKER, each padded with NULLs where the other's columns are. All parts read the
# statement's one snapshot, taken after the lock was granted, so the look-up leaves out exactly the
# lapsed rows the UPDATE expires (the lapsed set cannot change meanwhile: extending a hold needs it
# unexpired, and every other change needs the lock we hold), and no block can appear meanwhile
# (ingestion takes the lock too).
_LIVE_ON_K = f"""
SELECT * FROM bookings_reservation
 WHERE calendar_id = k.id AND {live("", now=NOW_PARAM)} AND {overlaps("")}
"""
_NO_RESERVATION = ", ".join(["NULL"] * RESERVATION_ROW_WIDTH)
_NO_BLOCK = ", ".join(f"NULL::{type_}" for type_ in _UPSTREAM_BLOCKER_TYPES)
CLEAR_THE_WAY_SQL = (
    _expire_lapsed_cte(overlapping=True)
    + f"""
SELECT 'expired', {RESERVATION_ROW_COLUMNS}, {_NO_BLOCK} FROM expired r {RESERVATION_ROW_JOINS}
UNION ALL
SELECT 'live', {RESERVATION_ROW_COLUMNS}, {_NO_BLOCK}
  FROM {each_calendar(_LIVE_ON_K, alias="r")} {RESERVATION_ROW_JOINS}
UNION ALL
SELECT 'upstream', {_NO_RESERVATION}, u.* FROM ({_UPSTREAM_BLOCKER}) AS u
"""
)

# The first live reservation or upstream busy block inside a calendar's buffer around the span (but
# not in the span itself: what is there, the takeover rules decide). Each calendar's buffer in seconds
# comes as %(buffers)s beside %(calendars)s; the index scan reads the span widened by the largest
# (`near_` overlap parameters). Nothing in a buffer is taken over: it is space, not a slot. A booking
# being moved (%(moving)s, its hold id) is not in its own way.
_IN_BUFFER = """
   AND x.start_time < %(end)s + make_interval(secs => b.secs)
   AND x.end_time > %(start)s - make_interval(secs => b.secs)
   AND NOT (x.start_time < %(end)s AND x.end_time > %(start)s)
"""
BUFFER_BLOCKER_SQL = f"""
SELECT x.start_time, x.end_time, x.kind, x.source, c.id, c.public_id, c.slot_minutes, b.secs
  FROM unnest(%(calendars)s::bigint[], %(buffers)s::int[]) AS b(id, secs)
  JOIN bookings_calendar c ON c.id = b.id
  JOIN LATERAL (
      SELECT r.start_time, r.end_time, r.status AS kind, NULL AS source FROM bookings_reservation r
       WHERE r.calendar_id = b.id AND {live("r", now=NOW_PARAM)} AND {overlaps("r", params="near_")}
         AND r.hold_id IS DISTINCT FROM %(moving)s
      UNION ALL
      SELECT u.start_time, u.end_time, 'busy', u.source FROM bookings_busyblock u
       WHERE u.calendar_id = b.id AND {overlaps("u", params="near_")}
  ) AS x ON true
 WHERE b.secs > 0 {_IN_BUFFER}
 ORDER BY x.start_time
 LIMIT 1
"""

# --- State transitions -------------------------------------------------------------------------------


def _transition(*, column: str, unexpired: bool) -> str:
    only_live = f"AND {live_hold('', now=NOW_PARAM)}" if unexpired else ""
    return f"""
WITH moved AS (
    UPDATE bookings_reservation SET status = %(to_status)s, version = version + 1, ended_at = {NOW_PARAM}
     WHERE id IN (SELECT id FROM bookings_reservation
                   WHERE {column} = %(key)s AND status = %(from_status)s {only_live}
                   ORDER BY id FOR UPDATE)
       AND status = %(from_status)s
    RETURNING *)
SELECT {RESERVATION_ROW_COLUMNS} FROM moved r {RESERVATION_ROW_JOINS}
"""


# CAS on one whole hold or booking: lock its rows in id order (two transactions touching the rows of
# one multi-calendar group then cannot deadlock), re-check the status after the lock, move the rows and
# read them back with their calendar and agent, in one statement. A row another transaction moved first
# is simply not returned; callers compare what came back with what they need. Keyed by (the group's key
# column, only holds that have not lapsed).
TRANSITION_SQL = {
    (column, unexpired): _transition(column=column, unexpired=unexpired)
    for column in ("hold_id", "booking_id")
    for unexpired in (False, True)
}

# The commit as one CAS statement: row locks in id order (like every group-row lock, see
# TRANSITION_SQL), then every row of the group moves from a live hold to committed, each with its own
# calendar's bump window fixed now (later setting changes don't move it). An agent's own commit also
# requires the hold not to be gated by an approval (the gate may have closed after the agent's read).
COMMIT_SQL = f"""
UPDATE bookings_reservation r
   SET status = 'committed', version = r.version + 1, committed_at = {NOW_PARAM},
       booking_id = 'bk_' || substr(r.hold_id, 5),
       bump_window_ends_at = {NOW_PARAM} + make_interval(secs => c.bump_window_seconds)
  FROM bookings_calendar c
 WHERE r.id IN (SELECT id FROM bookings_reservation WHERE hold_id = %(hold_id)s ORDER BY id FOR UPDATE)
   AND c.id = r.calendar_id AND {live_hold("r", now=NOW_PARAM)}
   AND (r.awaiting_approval IS NULL OR %(approved)s)
RETURNING r.id, r.version, r.booking_id, r.committed_at, r.bump_window_ends_at
"""

# A booking's move as one CAS: its rows (locked in id order, status re-checked) take the new span, each
# calendar's new version as its fencing token and a bump window restarted from now; a bumped booking
# brought back becomes committed again. Its upstream-conflict flag goes: the move was judged under the
# same locks against the upstream busy time, so the new span meets none. Read back with their calendar
# and agent.
MOVE_SQL = f"""
WITH moved AS (
    UPDATE bookings_reservation r
       SET start_time = %(start)s, end_time = %(end)s, status = 'committed', version = r.version + 1,
           fencing_token = v.version, ended_at = NULL, displaced_by_id = NULL, upstream_conflict_at = NULL,
           bump_window_ends_at = {NOW_PARAM} + make_interval(secs => c.bump_window_seconds)
      FROM bookings_calendar c, unnest(%(calendars)s::bigint[], %(versions)s::bigint[]) AS v(id, version)
     WHERE r.id IN (SELECT id FROM bookings_reservation WHERE booking_id = %(booking_id)s
                       AND status = %(from_status)s ORDER BY id FOR UPDATE)
       AND r.status = %(from_status)s AND c.id = r.calendar_id AND v.id = r.calendar_id
    RETURNING r.*)
SELECT {RESERVATION_ROW_COLUMNS} FROM moved r {RESERVATION_ROW_JOINS}
"""

# The heartbeat's CAS: still-live rows of the hold, locked in id order, get expires_at = now + ttl, and
# are read back with their calendar and agent. It takes no calendar lock, so its "now" is the clock at
# the statement (clock_timestamp(); now() would be the transaction's start).
EXTEND_SQL = f"""
WITH extended AS (
    UPDATE bookings_reservation
       SET expires_at = clock_timestamp() + make_interval(secs => %(ttl)s), version = version + 1
     WHERE id IN (SELECT id FROM bookings_reservation
                   WHERE hold_id = %(hold_id)s AND {live_hold("", now="clock_timestamp()")}
                   ORDER BY id FOR UPDATE)
       AND status = 'held'
    RETURNING *)
SELECT {RESERVATION_ROW_COLUMNS} FROM extended r {RESERVATION_ROW_JOINS}
"""

# The clock the heartbeat's CAS decided by, to explain a CAS that moved fewer rows.
CLOCK_SQL = "SELECT clock_timestamp()"

# --- Alternatives ------------------------------------------------------------------------------------


def busy_near_sql(*, now: str = NOW_PARAM, params: str = "") -> str:
    """Live reservations and upstream busy blocks near a request (lapsed holds left out): what
    alternatives must avoid. `params`: the prefix of the window's overlap parameters."""
    reservations = f"""
SELECT start_time, end_time FROM bookings_reservation
 WHERE calendar_id = k.id AND {live("", now=now)} AND {overlaps("", params=params)}
"""
    return f"""
SELECT r.start_time, r.end_time FROM {each_calendar(reservations, alias="r")}
UNION ALL
SELECT start_time, end_time FROM bookings_busyblock
 WHERE calendar_id = ANY(%(calendars)s) AND {overlaps("", params=params)}
"""


BUSY_NEAR_SQL = busy_near_sql()
