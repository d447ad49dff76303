"""Celery tasks: thin wrappers that take ids and call sync.services / sync.writeback."""

from __future__ import annotations

from celery import shared_task

from sync.models import Connection
from sync.notifications import connection_notify_owners
from sync.providers.errors import UpstreamError
from sync.services import UPSTREAM_ERRORS, connection_failed, connection_sync, connections_due, sync_log_purge
from sync.writeback import write_behind

# Upstream writes retry with exponential backoff (or the server's Retry-After) this many times before
# the connection is marked failing; the next scheduled sync tries again after that.
WRITE_BEHIND_RETRIES = 5


@shared_task(name="sync.sync_connection", ignore_result=True)
def sync_connection(connection_id: int) -> str:
    return connection_sync(connection_id).outcome


@shared_task(name="sync.sync_due", ignore_result=True)
def sync_due() -> int:
    """Periodic: enqueue the connections whose next sync is due (each run takes the connection's lease,
    so a connection enqueued twice still syncs once at a time)."""
    due = connections_due()
    for connection_id in due:
        sync_connection.delay(connection_id)
    return len(due)


@shared_task(name="sync.write_behind", bind=True, ignore_result=True, max_retries=WRITE_BEHIND_RETRIES)
def write_behind_task(self: object, connection_id: int) -> None:
    try:
        write_behind(connection_id)
    except Connection.DoesNotExist:
        return
    except UPSTREAM_ERRORS as exc:
        if isinstance(exc, UpstreamError) and exc.permanent:
            raise  # retrying cannot help; the next sync run marks the connection revoked
        retries = self.request.retries  # type: ignore[attr-defined]
        if retries >= WRITE_BEHIND_RETRIES:
            connection = Connection.objects.select_related("calendar").filter(pk=connection_id).first()
            if connection is not None:
                connection_failed(connection, f"Writing bookings upstream failed: {exc}", backoff=False)
            return
        retry_after = getattr(exc, "retry_after", None)
        countdown = retry_after if retry_after is not None else 2**retries
        raise self.retry(exc=exc, countdown=countdown) from exc  # type: ignore[attr-defined]


@shared_task(name="sync.write_behind_for_calendars", ignore_result=True)
def write_behind_for_calendars(calendar_ids: list[int]) -> None:
    """Bookings on these calendars changed: copy them upstream where a calendar is linked."""
    for connection_id in Connection.objects.filter(calendar_id__in=calendar_ids).values_list("pk", flat=True):
        write_behind_task.delay(connection_id)


@shared_task(name="sync.notify_owners", ignore_result=True)
def notify_owners(connection_pk: int) -> None:
    connection_notify_owners(connection_pk)


@shared_task(name="sync.purge_log", ignore_result=True)
def purge_log() -> int:
    return sync_log_purge()
