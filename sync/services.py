"""Connections' lifecycle and the sync run: connect (credentials checked first), sync (one at a time
per connection), record failures so they surface, disconnect."""

from __future__ import annotations

import logging
import random
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from agentcal import broker
from agentcal.clock import server_now
from agentcal.errors import (
    AgentCalError,
    ConnectionExists,
    NotFound,
    UnsafeUpstreamUrl,
    UpstreamAuthFailed,
    UpstreamNotACalendar,
    UpstreamUnreachable,
)
from agentcal.metrics import SYNC_RUNS
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.engine.upstream import upstream_blocks_replace
from bookings.models import Calendar
from sync.credentials import CredentialsUnreadable, seal
from sync.ingest import blocks_rebuild, horizon, process_pending
from sync.models import Connection, ConnectionStatus, IngestionRecord, UpstreamCopy, UpstreamEvent
from sync.oauth import Grant, seal_grant
from sync.problems import note_problem
from sync.providers.base import LeaseLost
from sync.providers.caldav import open_caldav
from sync.providers.caldav_client import CalendarInfo
from sync.providers.errors import AuthFailed, NotACalendar, Throttled, UpstreamError
from sync.providers.registry import provider_for
from sync.push.channels import push_channel_for
from sync.writeback import write_behind
from webhooks.models import EventType
from webhooks.outbox import outbox_emit
from workspaces.actor import Actor

logger = logging.getLogger(__name__)

# Recurring events are expanded again once a day, as the horizon's end moves on.
_ROLL_EVERY = timedelta(days=1)
# After push could not be set up, polling carries on alone this long before push is tried again.
PUSH_RETRY_AFTER_FAILURE = timedelta(hours=1)
# Push channels are replaced this long before they expire.
PUSH_RENEW_MARGIN = timedelta(days=1)
# Errors of a sync or write that failed upstream: the provider's answers, and what keeps us from
# asking (unreadable credentials, an unsupported or unsafe target). Retried with backoff unless the
# error is permanent.
UPSTREAM_ERRORS = (UpstreamError, CredentialsUnreadable, UpstreamUnreachable, UnsafeUpstreamUrl)
# Failed syncs back off exponentially up to this.
MAX_BACKOFF_SECONDS = 3600


def connection_create(
    *, actor: Actor, calendar: Calendar, provider: str, url: str, username: str, password: str
) -> Connection:
    """Link a calendar to an upstream CalDAV calendar. The credentials are tried first: a wrong
    password or a URL that is not a calendar is refused (and audited) before anything is stored."""
    try:
        return _connect(
            actor=actor, calendar=calendar, provider=provider, url=url, username=username, password=password
        )
    except AgentCalError as exc:
        if not exc.audited:
            audit_record(
                event_type=AuditEvent.CONNECTION_REJECTED,
                outcome=Outcome.REJECTED,
                actor=actor,
                calendar_public_id=calendar.public_id,
                http_status=exc.status,
                failure_reason=exc.code,
                details={"provider": provider, "url": url},
            )
            exc.audited = True
        raise


def _connect(
    *, actor: Actor, calendar: Calendar, provider: str, url: str, username: str, password: str
) -> Connection:
    if Connection.objects.filter(calendar=calendar).exists():
        raise ConnectionExists(
            f"Calendar {calendar.public_id} is already linked; delete that connection first."
        )
    info = _check_caldav(url, username, password)
    try:
        with transaction.atomic():
            connection = Connection.objects.create(
                workspace=actor.workspace,
                calendar=calendar,
                provider=provider,
                url=url,
                username=username,
                secret=seal({"password": password}),
                supports_sync=info.supports_sync,
                created_by_agent=actor.agent,
                created_by_user=actor.user_email,
            )
            audit_record(
                event_type=AuditEvent.CONNECTION_CREATED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                calendar_public_id=calendar.public_id,
                details={"connection": connection.public_id, "provider": provider, "url": url},
            )
    except IntegrityError:
        raise ConnectionExists(f"Calendar {calendar.public_id} is already linked.") from None
    transaction.on_commit(lambda: request_sync(connection.pk))
    return connection


def connection_create_oauth(
    *,
    actor: Actor,
    calendar: Calendar,
    provider: str,
    grant: Grant,
    remote_calendar_id: str,
    remote_calendar_name: str,
    account: str,
) -> Connection:
    """Link a calendar to a calendar of an OAuth-connected account (the person consented and picked it
    in the dashboard). Push is set up after the first sync, if this installation can receive it."""
    try:
        with transaction.atomic():
            if Connection.objects.select_for_update().filter(calendar=calendar).exists():
                raise ConnectionExists(
                    f"Calendar {calendar.public_id} is already linked; disconnect it first."
                )
            connection = Connection.objects.create(
                workspace=actor.workspace,
                calendar=calendar,
                provider=provider,
                username=account,
                remote_calendar_id=remote_calendar_id,
                remote_calendar_name=remote_calendar_name,
                secret=seal_grant(grant),
                created_by_agent=actor.agent,
                created_by_user=actor.user_email,
            )
            audit_record(
                event_type=AuditEvent.CONNECTION_CREATED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                calendar_public_id=calendar.public_id,
                details={
                    "connection": connection.public_id,
                    "provider": provider,
                    "calendar": remote_calendar_name,
                },
            )
    except IntegrityError:
        raise ConnectionExists(f"Calendar {calendar.public_id} is already linked.") from None
    transaction.on_commit(lambda: request_sync(connection.pk))
    return connection


def _check_caldav(url: str, username: str, password: str) -> CalendarInfo:
    try:
        with open_caldav(url, username, password) as client:
            return client.check()
    except AuthFailed:
        raise UpstreamAuthFailed("The CalDAV server refused the username or password.") from None
    except NotACalendar as exc:
        raise UpstreamNotACalendar(f"{url} is not a CalDAV calendar collection: {exc}") from None
    except UpstreamError as exc:
        raise UpstreamUnreachable(f"The CalDAV server could not be used: {exc}") from None


def connection_delete(*, actor: Actor, connection: Connection, remove_bookings: bool = False) -> None:
    """Unlink: the upstream busy time stops blocking at once (blocks go under the calendar lock), the
    provider's push channel is stopped, and, only if asked, the copies of our bookings written to the
    person's calendar are removed from it (by default they stay: they are meetings people expect).
    The upstream steps are best effort: what could not be done is in the audit row."""
    upstream = _disconnect_upstream(connection, remove_bookings=remove_bookings)
    with transaction.atomic(durable=True):
        # The connection's row first, then the calendar: the order processing takes them in.
        if not Connection.objects.select_for_update().filter(pk=connection.pk).exists():
            raise NotFound(f"No connection {connection.public_id}: it was deleted meanwhile.")
        upstream_blocks_replace(
            calendar_id=connection.calendar_id,
            connection_id=connection.pk,
            source=connection.provider,
            changes=[],
            replace_all=True,
        )
        _allow_log_deletion()
        public_id, calendar_public_id = connection.public_id, connection.calendar.public_id
        deleted, _ = Connection.objects.filter(pk=connection.pk).delete()
        if not deleted:
            raise NotFound(f"No connection {public_id}: it was deleted meanwhile.")
        audit_record(
            event_type=AuditEvent.CONNECTION_DELETED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            calendar_public_id=calendar_public_id,
            details={"connection": public_id, **upstream},
        )


def _disconnect_upstream(connection: Connection, *, remove_bookings: bool) -> dict[str, object]:
    done: dict[str, object] = {"push_stopped": None, "bookings_removed": 0, "bookings_left": 0}
    if connection.status == ConnectionStatus.REVOKED:
        return done  # nothing can be done there any more
    provider, push = provider_for(connection), push_channel_for(connection)
    try:
        if connection.push_id:
            if push is not None:
                push.close(connection)
            done["push_stopped"] = True
    except UPSTREAM_ERRORS as exc:
        logger.warning("push of %s not stopped: %s", connection.public_id, exc)
        done["push_stopped"] = False
    if remove_bookings:
        for copy in UpstreamCopy.objects.filter(connection=connection):
            try:
                provider.remove_copy(connection, copy.resource_name)
                done["bookings_removed"] = int(str(done["bookings_removed"])) + 1
            except UPSTREAM_ERRORS as exc:
                logger.warning("copy %s of %s left upstream: %s", copy.booking_id, connection.public_id, exc)
                done["bookings_left"] = int(str(done["bookings_left"])) + 1
    return done


def _allow_log_deletion() -> None:
    """The ingestion log refuses DELETE unless the transaction says it is the purge (or a
    disconnection, whose log goes with it)."""
    with transaction.get_connection().cursor() as cursor:
        cursor.execute("SET LOCAL agentcal.sync_log_purge = 'on'")


def request_sync(connection_id: int) -> None:
    """Sync soon ("sync now", a new connection, a push): through the same task as the schedule. The
    connection is marked due first, so if the broker is down the scheduler still picks it up (no
    fallback: the due row is the work)."""
    Connection.objects.filter(pk=connection_id).update(next_sync_at=Now())
    broker.enqueue_on_commit("sync.sync_connection", (connection_id,), fallback=None)


# --- The sync run ------------------------------------------------------------------------------------


@dataclass
class SyncRun:
    outcome: str  # "synced", "busy" (another run holds the lease), "failed", "gone"
    records: int = 0
    error: str = ""
    retry_after: float | None = None


@dataclass
class _Lease:
    """At most one sync of a connection at a time, across workers: a lease on its row (not a session
    lock, which would hold a database session across the upstream calls). Renewed between the run's
    phases; the fetch commits only while the lease is still this run's (providers.LeaseLost)."""

    connection_id: int
    token: str = field(default_factory=lambda: secrets.token_hex(8))

    def take(self, *, unless_synced_since: datetime | None = None) -> bool:
        free = Connection.objects.filter(
            Q(pk=self.connection_id), Q(lease_until__isnull=True) | Q(lease_until__lt=Now())
        )
        if unless_synced_since is not None:
            # Decided in the same UPDATE as the lease: a run that ended after the caller's look counts.
            free = free.filter(Q(last_synced_at__isnull=True) | Q(last_synced_at__lt=unless_synced_since))
        return bool(free.update(lease_until=self._until(), lease_token=self.token))

    def renew(self) -> None:
        if not Connection.objects.filter(pk=self.connection_id, lease_token=self.token).update(
            lease_until=self._until()
        ):
            raise LeaseLost(str(self.connection_id))

    def release(self) -> None:
        Connection.objects.filter(pk=self.connection_id, lease_token=self.token).update(
            lease_until=None, lease_token=""
        )

    @staticmethod
    def _until() -> datetime:
        return server_now() + timedelta(seconds=settings.SYNC_LEASE_SECONDS)


def connection_sync(connection_id: int, *, unless_synced_since: datetime | None = None) -> SyncRun:
    """One sync: process what a crashed run left in the log, fetch the changes into the log, process
    them, re-expand if the horizon has moved on, and write our bookings upstream. With
    `unless_synced_since`, none ("busy") if a run that ended since has synced it already."""
    lease = _Lease(connection_id)
    if not lease.take(unless_synced_since=unless_synced_since):
        return SyncRun("busy")
    try:
        return _sync_leased(connection_id, lease)
    except LeaseLost:
        return SyncRun("busy")
    finally:
        lease.release()


def _sync_leased(connection_id: int, lease: _Lease) -> SyncRun:
    connection = Connection.objects.filter(pk=connection_id).select_related("calendar").first()
    if connection is None:
        return SyncRun("gone")
    started = server_now()
    try:
        process_pending(connection.pk)
        connection.refresh_from_db()
        lease.renew()
        fetched = provider_for(connection).fetch(connection, lease_token=lease.token)
        process_pending(connection.pk)
        if (
            connection.expanded_until is None
            or connection.expanded_until < horizon(started).end - _ROLL_EVERY
        ):
            blocks_rebuild(connection.pk)
    except LeaseLost:
        raise
    except UPSTREAM_ERRORS as exc:
        if isinstance(exc, UpstreamError) and exc.permanent:
            connection_revoked(connection, str(exc))
            SYNC_RUNS.labels(connection.provider, "revoked").inc()
            return SyncRun("revoked", error=str(exc))
        if isinstance(exc, Throttled):
            _throttled(connection, exc.retry_after)
            SYNC_RUNS.labels(connection.provider, "throttled").inc()
            return SyncRun("throttled", error=str(exc), retry_after=exc.retry_after)
        retry_after = getattr(exc, "retry_after", None)
        connection_failed(connection, str(exc), retry_after=retry_after)
        SYNC_RUNS.labels(connection.provider, "failed").inc()
        return SyncRun("failed", error=str(exc), retry_after=retry_after)
    except Exception as exc:
        # Our own fault, not the upstream's: still surfaced on the connection (and backed off, so the
        # schedule does not spin on it), then raised for the worker's log.
        connection_failed(connection, f"Internal error while syncing ({type(exc).__name__}); see the logs.")
        SYNC_RUNS.labels(connection.provider, "error").inc()
        raise
    SYNC_RUNS.labels(connection.provider, "synced").inc()
    try:
        lease.renew()
        write_behind(connection.pk)
        _keep_push_open(connection)
    except UPSTREAM_ERRORS as exc:
        if isinstance(exc, UpstreamError) and exc.permanent:
            connection_revoked(connection, str(exc))
            return SyncRun("revoked", error=str(exc))
        # Reading works: the person's busy time keeps its schedule; the failing write shows (and is
        # announced once, not on every run).
        _succeeded(connection, started, healthy=False)
        connection.refresh_from_db()
        connection_failed(connection, f"Writing bookings upstream failed: {exc}", backoff=False)
        return SyncRun("synced", records=fetched.records, error=str(exc))
    _succeeded(connection, started)
    return SyncRun("synced", records=fetched.records)


def _interval(connection: Connection) -> float:
    """How long until the next scheduled sync: CalDAV is polled; an OAuth provider with a live push
    channel is polled only as a fallback, more slowly."""
    if push_channel_for(connection) is None:
        return float(settings.SYNC_CALDAV_INTERVAL_SECONDS)
    if connection.push_expires_at is not None and connection.push_expires_at > server_now():
        return float(settings.SYNC_PUSH_FALLBACK_INTERVAL_SECONDS)
    return float(settings.SYNC_OAUTH_INTERVAL_SECONDS)


def _throttled(connection: Connection, retry_after: float | None) -> None:
    """The provider asked us to slow down: not a failure, a pause. Exponential backoff with jitter per
    connection (or what it asked for), counted for the dashboard."""
    connection.refresh_from_db()
    streak = connection.throttled_streak + 1
    backoff = min(2.0**streak, MAX_BACKOFF_SECONDS) * random.uniform(1.0, 1.5)  # noqa: S311 (spreading load)
    Connection.objects.filter(pk=connection.pk).update(
        throttled_count=F("throttled_count") + 1,
        throttled_streak=streak,
        next_sync_at=server_now() + timedelta(seconds=max(backoff, retry_after or 0.0)),
    )


def connection_revoked(connection: Connection, error: str) -> None:
    """The provider no longer honours the grant: stop (no retries: they cannot succeed), and say so
    once (dashboard, audit, `connection.failed`)."""
    with transaction.atomic():
        changed = (
            Connection.objects.filter(pk=connection.pk)
            .exclude(status=ConnectionStatus.REVOKED)
            .update(
                status=ConnectionStatus.REVOKED,
                last_error=f"Access was revoked or expired; connect the calendar again. ({error[:300]})",
                last_error_at=server_now(),
                push_expires_at=None,
            )
        )
        if changed:
            connection.refresh_from_db()
            note_problem(connection, connection.last_error)
            _announce_failure(connection, connection.last_error)


def _succeeded(connection: Connection, started: datetime, *, healthy: bool = True) -> None:
    """The read side of a sync succeeded: schedule the next one. `healthy`: everything did (a failing
    connection recovers)."""
    connection.refresh_from_db()  # the run may have opened a push channel, which changes the interval
    jitter = random.uniform(0, 0.1) * _interval(connection)  # noqa: S311 (spreading load, not security)
    was_failing = connection.status == ConnectionStatus.FAILING
    recovered = {"status": ConnectionStatus.ACTIVE, "consecutive_failures": 0, "last_error": ""}
    Connection.objects.filter(pk=connection.pk).update(
        last_synced_at=started,
        throttled_streak=0,
        next_sync_at=started + timedelta(seconds=_interval(connection) + jitter),
        **(recovered if healthy else {}),
    )
    if was_failing and healthy:
        audit_record(
            event_type=AuditEvent.CONNECTION_RECOVERED,
            outcome=Outcome.SUCCESS,
            actor=None,
            workspace_id=connection.workspace_id,
            calendar_public_id=connection.calendar.public_id,
            details={"connection": connection.public_id},
        )


def connection_failed(
    connection: Connection, error: str, *, retry_after: float | None = None, backoff: bool = True
) -> None:
    """Record a failed sync or upstream write where people and agents see it: the connection's status
    and last error (API, dashboard), an audit row, and on the first failure a `connection.failed`
    event. With `backoff` the next sync waits longer after each failure (or what the server asked);
    without (a failed write while reading works), the schedule stays as it is."""
    failures = connection.consecutive_failures + 1
    delay = max(
        min(_interval(connection) * 2 ** min(failures - 1, 10), MAX_BACKOFF_SECONDS), retry_after or 0.0
    )
    now = server_now()
    with transaction.atomic():
        Connection.objects.filter(pk=connection.pk).update(
            status=ConnectionStatus.FAILING,
            last_error=error[:2000],
            last_error_at=now,
            consecutive_failures=failures,
            **({"next_sync_at": now + timedelta(seconds=delay)} if backoff else {}),
        )
        note_problem(connection, error)
        if failures == 1:
            connection.status = ConnectionStatus.FAILING
            _announce_failure(connection, error)
    connection.refresh_from_db()


def _announce_failure(connection: Connection, error: str) -> None:
    """An audit row, `connection.failed` to the agent that linked it, and an email to the workspace's
    owners (after the commit), besides the dashboard."""
    audit_record(
        event_type=AuditEvent.CONNECTION_FAILED,
        outcome=Outcome.FAILED,
        actor=None,
        workspace_id=connection.workspace_id,
        calendar_public_id=connection.calendar.public_id,
        failure_reason="upstream_revoked"
        if connection.status == ConnectionStatus.REVOKED
        else "upstream_error",
        details={"connection": connection.public_id, "error": error[:500]},
    )
    if connection.created_by_agent_id is not None:
        outbox_emit(
            event_type=EventType.CONNECTION_FAILED,
            workspace_id=connection.workspace_id,
            agent_id=connection.created_by_agent_id,
            data={"connection": connection_data(connection), "error": error[:500]},
        )
    # Emailed from a worker; if the broker refuses the message, the publisher's thread sends it.
    broker.enqueue_on_commit("sync.notify_owners", (connection.pk,), fallback=broker.RUN_HERE)


def _keep_push_open(connection: Connection) -> None:
    """Open the provider's push channel (Google) or subscription (Microsoft), and a day before it
    expires replace it (Google's channels cannot be renewed) or renew it (Microsoft), when this
    installation can receive notifications. Best effort: without push, the schedule polls."""
    push = push_channel_for(connection)
    if push is None or not settings.SYNC_PUSH_ENABLED:
        return
    connection.refresh_from_db()
    now = server_now()
    if connection.push_expires_at is not None and connection.push_expires_at > now + PUSH_RENEW_MARGIN:
        return
    if connection.push_retry_at is not None and connection.push_retry_at > now:
        return  # it failed lately (setting up push can take the provider seconds): poll meanwhile
    try:
        push.keep_open(connection)
    except UpstreamError as exc:
        if exc.permanent:
            raise  # the run's revocation, not a push problem
        logger.warning("push for %s not opened or renewed: %s", connection.public_id, exc)
        Connection.objects.filter(pk=connection.pk).update(push_retry_at=now + PUSH_RETRY_AFTER_FAILURE)
        note_problem(connection, f"Push notifications could not be set up (polling instead): {exc}")


def connection_data(connection: Connection) -> dict[str, object]:
    return {
        "id": connection.public_id,
        "calendar": connection.calendar.public_id,
        "provider": connection.provider,
        "url": connection.url,
        "status": connection.status,
    }


def connections_due(limit: int = 100) -> list[int]:
    """Claim the connections whose next sync is due and that no run holds: their next sync moves one
    interval on (the run sets the real one when it ends), so a slow queue does not fill up with the same
    connection every scheduler tick, and a lost message is retried after an interval."""
    with transaction.atomic():
        due = list(
            Connection.objects.filter(next_sync_at__lte=Now())
            .exclude(status=ConnectionStatus.REVOKED)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=Now()))
            .order_by("next_sync_at")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:limit]
        )
        later = server_now() + timedelta(seconds=settings.SYNC_CALDAV_INTERVAL_SECONDS)
        Connection.objects.filter(pk__in=due).update(next_sync_at=later)
    return due


def sync_log_purge() -> int:
    """Delete log records past retention that no event's current state needs, and the tombstones
    (with their records) older than that: replaying what is left still gives the same blocks."""
    cutoff = server_now() - timedelta(days=settings.SYNC_LOG_RETENTION_DAYS)
    with transaction.atomic():
        _allow_log_deletion()
        UpstreamEvent.objects.filter(deleted_at__lt=cutoff).delete()
        deleted, _ = (
            IngestionRecord.objects.filter(received_at__lt=cutoff, pk__lte=F("connection__processed_through"))
            .exclude(pk__in=UpstreamEvent.objects.filter(record__isnull=False).values("record_id"))
            .delete()
        )
    return deleted
