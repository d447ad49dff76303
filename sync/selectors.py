"""What people's pages read of calendars' links to their owners' own calendars."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Now

from bookings.models import Calendar, ReservationStatus, live_hold_q
from sync.models import Connection, UpstreamEvent
from workspaces.models import Workspace


def calendars_with_links(workspace: Workspace) -> QuerySet[Calendar]:
    """The workspace's calendars by name, each with its link (`upstream_connection`, when it has one) and
    its counts of live holds (`live_holds`) and upcoming bookings (`upcoming`)."""
    live_hold = live_hold_q(prefix="reservations__")
    upcoming = Q(reservations__status=ReservationStatus.COMMITTED, reservations__end_time__gt=Now())
    return (
        Calendar.objects.filter(workspace=workspace)
        .select_related("upstream_connection")
        .annotate(
            live_holds=Count("reservations", filter=live_hold),
            upcoming=Count("reservations", filter=upcoming),
        )
        .order_by("name", "id")
    )


def calendar_connection(calendar: Calendar) -> Connection | None:
    return Connection.objects.filter(calendar=calendar).select_related("created_by_agent").first()


def connection_in_workspace(workspace: Workspace, public_id: str) -> Connection | None:
    return (
        Connection.objects.filter(workspace=workspace, public_id=public_id).select_related("calendar").first()
    )


def unreadable_events(connection: Connection, *, listed: int) -> tuple[int, list[UpstreamEvent]]:
    """How many of the link's upstream events could not be read, and the `listed` most recent of them
    (no second query when there are none)."""
    unreadable = UpstreamEvent.objects.filter(connection=connection, deleted_at=None).exclude(problem="")
    count = unreadable.count()
    if not count:
        return 0, []
    return count, list(unreadable.order_by("-updated_at", "-id")[:listed])


def whole_span_events(connection: Connection, *, listed: int) -> list[UpstreamEvent]:
    """The `listed` most recent of the link's series too costly to expand (each blocks its whole span)."""
    return list(
        UpstreamEvent.objects.filter(connection=connection, deleted_at=None)
        .exclude(warning="")
        .order_by("-updated_at", "-id")[:listed]
    )


def workspace_connections(workspace: Workspace) -> list[Connection]:
    """The workspace's links, by calendar name, with their calendars."""
    return list(
        Connection.objects.filter(workspace=workspace)
        .select_related("calendar")
        .order_by("calendar__name", "id")
    )
