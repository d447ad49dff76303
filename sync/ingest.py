"""From the ingestion log to busy blocks: fold new records into each upstream event's state (newest
version wins, deletions tombstone) and replace the calendar's blocks, all in one transaction that
also advances the connection's `processed_through`. Replaying the log from the start rebuilds the
same blocks (ingestion_replay)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction

from agentcal.metrics import SYNC_LAG_SECONDS
from bookings.engine.upstream import NeedMoreLocks, UpstreamApplied, UpstreamChange, upstream_blocks_replace
from bookings.models import Reservation
from bookings.spans import Span
from sync.formats import SELF_ADDRESS, as_icalendar, is_series_part, version_of
from sync.ical import (
    ExpansionBudget,
    ExpansionCutShort,
    InvalidCalendarData,
    agentcal_booking_id,
    busy_intervals,
)
from sync.models import Connection, IngestionRecord, Provider, RecordKind, UpstreamEvent
from sync.problems import note_problem

# Blocks start this far back (an event in progress still blocks the rest of itself).
HORIZON_PAST = timedelta(days=1)
_OLDEST = datetime.min.replace(tzinfo=UTC)


def horizon(now: datetime) -> Span:
    """The window upstream events are expanded over: recurring series are cut off at its end."""
    return Span(now - HORIZON_PAST, now + timedelta(days=settings.SYNC_HORIZON_DAYS))


def log_records(connection: Connection, records: Iterable[IngestionRecord]) -> None:
    """Append fetched payloads to the log (in the caller's transaction, with the sync token they
    came with). Version markers are read from the data here, so the log shows them without parsing."""
    batch = []
    for record in records:
        record.connection = connection
        record.provider = connection.provider
        if record.kind == RecordKind.RESOURCE and record.payload:
            try:
                version = version_of(connection.provider, record.payload)
            except InvalidCalendarData:
                pass  # logged as received; processing records the problem on the event
            else:
                record.uid, record.sequence, record.modified = version.uid, version.sequence, version.modified
        batch.append(record)
    IngestionRecord.objects.bulk_create(batch, batch_size=500)


@dataclass
class Processed:
    records: int
    applied: UpstreamApplied


def process_pending(connection_id: int, *, rebuild: bool = False) -> Processed | None:
    """Fold the log's unprocessed records into blocks. Safe to run anywhere at any time: the
    connection's row lock serialises processors, and a record is processed exactly once. `rebuild`:
    replace every block of the connection, not only the changed events' (a replay)."""
    lock_ids: set[int] = set()
    for _ in range(3):
        try:
            with transaction.atomic(durable=True):
                return _process(connection_id, lock_ids=lock_ids, rebuild=rebuild)
        except NeedMoreLocks as more:
            lock_ids |= more.calendar_ids
    raise RuntimeError("the holds under new upstream events kept spreading to more calendars")


def ingestion_replay(connection_id: int) -> Processed | None:
    """Forget every processed state of the connection and rebuild its blocks from the log alone."""
    with transaction.atomic():
        UpstreamEvent.objects.filter(connection_id=connection_id).delete()
        Connection.objects.filter(pk=connection_id).update(processed_through=0)
    return process_pending(connection_id, rebuild=True)


def blocks_rebuild(connection_id: int) -> UpstreamApplied | None:
    """Re-expand every current event over today's horizon (recurring series roll forward)."""
    lock_ids: set[int] = set()
    for _ in range(3):
        try:
            with transaction.atomic(durable=True):
                connection = Connection.objects.select_for_update().get(pk=connection_id)
                events = list(UpstreamEvent.objects.filter(connection=connection).select_related("record"))
                return _apply(connection, events, replace_all=True, lock_ids=lock_ids)
        except NeedMoreLocks as more:
            lock_ids |= more.calendar_ids
    return None


def _process(connection_id: int, *, lock_ids: set[int], rebuild: bool) -> Processed | None:
    connection = Connection.objects.select_for_update().get(pk=connection_id)
    records = list(
        IngestionRecord.objects.filter(connection=connection, id__gt=connection.processed_through).order_by(
            "id"
        )
    )
    if not records:
        return None
    affected, full = _fold(connection, records, everything=rebuild)
    applied = _apply(connection, affected, replace_all=full, lock_ids=lock_ids)
    connection.processed_through = records[-1].id
    updates = ["processed_through"]
    lags = _lags(connection, records, enforced_at=applied.now)
    if lags:
        connection.sync_lag_seconds = max(lags)
        updates.append("sync_lag_seconds")
        observe = SYNC_LAG_SECONDS.labels(connection.provider).observe
        transaction.on_commit(lambda: [observe(lag) for lag in lags])
    connection.save(update_fields=updates)
    return Processed(records=len(records), applied=applied)


def _fold(
    connection: Connection, records: Sequence[IngestionRecord], *, everything: bool
) -> tuple[list[UpstreamEvent], bool]:
    """Apply the records, in log order, to the events' states; return the events they changed, and
    whether every block of the connection is to be replaced (a full listing was among them, or
    `everything` was asked for)."""
    full = everything or any(r.kind == RecordKind.SNAPSHOT for r in records)
    known = UpstreamEvent.objects.filter(connection=connection)
    if not full:
        known = known.filter(resource__in={r.resource for r in records})
    events = {e.resource: e for e in known.select_related("record")}
    changed: dict[str, UpstreamEvent] = {}
    for record in records:
        if record.kind == RecordKind.RESOURCE:
            event = events.get(record.resource)
            if event is None:
                event = events[record.resource] = UpstreamEvent(
                    connection=connection, resource=record.resource
                )
            elif _older(record, event):
                continue  # a stale copy arriving late never overwrites a newer version
            elif event.deleted_at is not None and not _written_after(record, event):
                continue  # a copy of what was deleted, arriving late, does not bring it back
            event.uid, event.etag = record.uid, record.etag
            event.sequence, event.modified = record.sequence or 0, record.modified
            event.record, event.deleted_at = record, None
            changed[record.resource] = event
        elif record.kind == RecordKind.DELETED:
            event = events.get(record.resource)
            if event is not None and event.deleted_at is None:
                event.deleted_at = record.received_at
                changed[record.resource] = event
        else:
            present = set(json.loads(record.payload))
            for event in events.values():
                if event.deleted_at is None and event.resource not in present:
                    event.deleted_at = record.received_at
                    changed[event.resource] = event
    for event in changed.values():
        if event.pk is None:
            event.save()
        else:
            event.save(update_fields=["uid", "etag", "sequence", "modified", "record", "deleted_at"])
    if not full and connection.provider == Provider.GOOGLE:
        # A series' busy time is computed on its master, with its exceptions: a changed exception
        # changes its master's blocks (and the other way round).
        uids = {event.uid for event in changed.values() if event.uid}
        for event in UpstreamEvent.objects.filter(connection=connection, uid__in=uids).select_related(
            "record"
        ):
            changed.setdefault(event.resource, event)
    if full:
        return list(events.values()), True
    return list(changed.values()), False


def _older(record: IngestionRecord, event: UpstreamEvent) -> bool:
    """Is the record's version strictly older than the live event's? (SEQUENCE first, then the
    modification time; an ETag is opaque and orders nothing.) Equal versions are applied. A deleted
    event is judged by _written_after instead: a re-created event starts its SEQUENCE again."""
    if record.sequence is None or event.deleted_at is not None:
        return False
    mine = (record.sequence, record.modified or _OLDEST)
    theirs = (event.sequence, event.modified or _OLDEST)
    return mine < theirs


def _written_after(record: IngestionRecord, event: UpstreamEvent) -> bool:
    """Was this copy of a deleted event written after the version that was deleted? (Re-created or
    restored: it comes back. The deleted version itself, or an older one: it does not.)"""
    return record.modified is not None and (event.modified is None or record.modified > event.modified)


def _apply(
    connection: Connection, events: Sequence[UpstreamEvent], *, replace_all: bool, lock_ids: set[int]
) -> UpstreamApplied:
    window = horizon(datetime.now(UTC))
    # One budget for every event this pass expands: a sync makes at most three passes (what a crashed run
    # left, what it fetched, the horizon's roll), so its expansion work is bounded however the events repeat.
    budget = ExpansionBudget(
        per_event=settings.SYNC_EXPANSION_STEPS_PER_EVENT, left=settings.SYNC_EXPANSION_STEPS_PER_SYNC
    )
    changes = [UpstreamChange(event.resource, _spans(connection, event, window, budget)) for event in events]
    applied = upstream_blocks_replace(
        calendar_id=connection.calendar_id,
        connection_id=connection.pk,
        source=connection.provider,
        changes=changes,
        replace_all=replace_all,
        lock_ids=sorted(lock_ids),
    )
    if replace_all:
        Connection.objects.filter(pk=connection.pk).update(expanded_until=window.end)
    return applied


def _spans(connection: Connection, event: UpstreamEvent, window: Span, budget: ExpansionBudget) -> list[Span]:
    """The busy spans an event gives over the window: none if deleted, if it is the echo of one of
    this calendar's own bookings, or if its data cannot be read (recorded on the event). A series too
    costly to expand blocks its whole span (recorded on the event, and among the connection's problems
    when it starts to)."""
    if event.deleted_at is not None or event.record is None:
        return []
    payload = event.record.payload
    problem, warning, booking_id, data = "", "", "", payload
    spans: list[Span] = []
    try:
        if is_series_part(connection.provider, payload) and _series(connection, event, masters=True):
            return []  # an exception of a series: its master's expansion places it
        data = as_icalendar(connection.provider, payload, _series(connection, event, masters=False))
        booking_id = agentcal_booking_id(data) or ""
        own = _own_span(booking_id, connection) if booking_id else None
        if own is None:
            booking_id = ""
        intervals = busy_intervals(
            data,
            window_start=window.start,
            window_end=window.end,
            calendar_tz=connection.calendar.timezone,
            attendee_addresses=_addresses(connection),
            budget=budget,
        )
        # Our own booking's copy, where we wrote it, is the booking itself: it must not block it. If
        # the person moved or repeated the copy, what they made of it blocks like any event.
        spans = [Span(i.start, i.end) for i in intervals if Span(i.start, i.end) != own]
    except ExpansionCutShort as cut:
        # Blocking too much is the safe side: an occurrence never computed must not be bookable.
        spans = [Span(i.start, i.end) for i in cut.intervals]
        warning = str(cut)
    except InvalidCalendarData as exc:
        problem = str(exc)
    recurring = any(marker in data for marker in ("RRULE:", "RDATE", "RECURRENCE-ID"))
    if bool(warning) != bool(event.warning) and warning:
        # Said once when the event starts to block its whole span, not on every re-expansion.
        note_problem(connection, f"Upstream event {event.resource[:200]}: {warning}")
    if (event.problem, event.warning, event.booking_id, event.recurring) != (
        problem,
        warning,
        booking_id,
        recurring,
    ):
        event.problem, event.warning, event.booking_id, event.recurring = (
            problem,
            warning,
            booking_id,
            recurring,
        )
        event.save(update_fields=["problem", "warning", "booking_id", "recurring"])
    return spans


def _series(connection: Connection, event: UpstreamEvent, *, masters: bool) -> list[str]:
    """The payloads of the other live resources of the event's series (same UID): its masters, or all."""
    if connection.provider != Provider.GOOGLE or not event.uid:
        return []
    siblings = (
        UpstreamEvent.objects.filter(connection=connection, uid=event.uid, deleted_at=None)
        .exclude(pk=event.pk)
        .select_related("record")
    )
    payloads = [s.record.payload for s in siblings if s.record is not None]
    return [p for p in payloads if not is_series_part(connection.provider, p)] if masters else payloads


def _own_span(booking_id: str, connection: Connection) -> Span | None:
    """The span of our booking on this calendar that an upstream copy (the echo of write-behind) names."""
    row = (
        Reservation.objects.filter(booking_id=booking_id, calendar=connection.calendar_id)
        .only("start_time", "end_time")
        .first()
    )
    return None if row is None else Span(row.start_time, row.end_time)


def _addresses(connection: Connection) -> frozenset[str]:
    """The calendar owner's own addresses: an invitation they declined does not block them."""
    own = {SELF_ADDRESS}
    if "@" in connection.username:
        own.add(connection.username.lower())
    return frozenset(own)


def _lags(
    connection: Connection, records: Sequence[IngestionRecord], *, enforced_at: datetime
) -> list[float]:
    """Sync lag of the changes made while we were watching (a first sync's old events measure nothing):
    from the upstream modification to enforcement, never negative (the upstream clock may run ahead)."""
    if connection.last_synced_at is None:
        return []
    if connection.last_push_at is not None and connection.last_push_at > connection.last_synced_at:
        # A push told us: from the notification's arrival (the provider does not say when it changed).
        changes = [r for r in records if r.kind != RecordKind.SNAPSHOT]
        return [max(0.0, (enforced_at - connection.last_push_at).total_seconds())] if changes else []
    return [
        max(0.0, (enforced_at - record.modified).total_seconds())
        for record in records
        if record.kind == RecordKind.RESOURCE
        and record.modified is not None
        and record.modified
        > connection.last_synced_at - timedelta(seconds=settings.SYNC_CALDAV_INTERVAL_SECONDS)
    ]
