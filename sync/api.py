"""Agent API for upstream calendar connections: link a calendar to CalDAV, read sync status, sync
now, unlink. Credentials go in and never come out."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import OutboundUrlField, OutputSerializer, StrictSerializer, validated
from agentcal.api.schema import page_of
from agentcal.api.views import AgentAPIView
from agentcal.errors import NotFound
from bookings.api.common import calendar_for
from sync.models import Connection, ConnectionStatus, Provider
from sync.services import connection_create, connection_delete, request_sync
from workspaces.actor import Actor
from workspaces.models import Scope


class ConnectionInput(StrictSerializer):
    provider = serializers.ChoiceField(
        choices=[Provider.CALDAV.value],
        help_text="`caldav` (Google and Microsoft 365 are connected by a signed-in person in the dashboard).",
    )
    url = OutboundUrlField(max_length=2048, help_text="The calendar collection's https URL.")
    username = serializers.CharField(max_length=320)
    password = serializers.CharField(
        max_length=1024, write_only=True, trim_whitespace=False, help_text="An app password; never returned."
    )


class DisconnectQuery(serializers.Serializer):
    remove_bookings = serializers.BooleanField(
        default=False,
        help_text="Also delete the copies of our bookings from the person's calendar (kept by default).",
    )


class RecentErrorOutput(OutputSerializer):
    at = serializers.DateTimeField()
    error = serializers.CharField()


class ConnectionOutput(OutputSerializer):
    id = serializers.CharField(source="public_id")
    calendar = serializers.CharField(source="calendar.public_id")
    provider = serializers.ChoiceField(choices=Provider.choices)
    url = serializers.CharField(
        help_text="CalDAV: the calendar collection's URL (empty for OAuth providers)."
    )
    username = serializers.CharField(help_text="CalDAV: the username; OAuth providers: the account.")
    remote_calendar_name = serializers.CharField(
        help_text="OAuth providers: the calendar picked in the account."
    )
    status = serializers.ChoiceField(
        choices=ConnectionStatus.choices,
        help_text="`pending` (first sync not done), `active`, `failing` (retrying with backoff) or `revoked` "
        "(the provider no longer honours the grant: connect again).",
    )
    last_synced_at = serializers.DateTimeField(allow_null=True)
    sync_lag_seconds = serializers.FloatField(
        allow_null=True, help_text="Of the latest change seen: from its upstream modification to enforcement."
    )
    next_sync_at = serializers.DateTimeField()
    last_error = serializers.CharField(allow_null=True, source="last_error_or_none")
    last_error_at = serializers.DateTimeField(allow_null=True)
    consecutive_failures = serializers.IntegerField()
    recent_errors = RecentErrorOutput(many=True, help_text="The latest problems, newest first.")
    throttled_count = serializers.IntegerField(
        help_text="How often the provider asked us to slow down (429, rateLimitExceeded): its quota use."
    )
    push_expires_at = serializers.DateTimeField(
        allow_null=True, help_text="When the provider's push channel or subscription lapses (null: polled)."
    )
    created_at = serializers.DateTimeField()


def connection_payload(connection: Connection) -> dict[str, object]:
    connection.last_error_or_none = connection.last_error or None  # type: ignore[attr-defined]
    return ConnectionOutput(connection).data


def connection_for(actor: Actor, public_id: str) -> Connection:
    """The connection in the caller's workspace, or 404 (another workspace's is not revealed)."""
    connection = (
        Connection.objects.filter(workspace=actor.workspace, public_id=public_id)
        .select_related("calendar")
        .first()
    )
    if connection is None:
        raise NotFound(f"No connection {public_id} in this workspace.")
    return connection


class ConnectionListView(AgentAPIView):
    summaries = {"GET": "List a calendar's upstream links", "POST": "Link a calendar to an upstream calendar"}
    operation_ids = {"GET": "list_connections", "POST": "create_connection"}
    required_scopes = {"GET": Scope.CALENDARS_READ, "POST": Scope.CALENDARS_WRITE}
    audit_action = "sync.connection"

    @extend_schema(responses={200: page_of(ConnectionOutput)})
    def get(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id)
        connections = Connection.objects.filter(calendar=calendar).select_related("calendar")
        return Response({"results": [connection_payload(c) for c in connections], "next_cursor": None})

    @extend_schema(request=ConnectionInput, responses={201: ConnectionOutput})
    def post(self, request: Request, calendar_id: str) -> Response:
        calendar = calendar_for(self.actor, calendar_id)
        data = validated(ConnectionInput, request.data)
        connection = connection_create(actor=self.actor, calendar=calendar, **data)
        return Response(
            connection_payload(connection),
            status=201,
            headers={"Location": f"/v1/connections/{connection.public_id}"},
        )


class ConnectionDetailView(AgentAPIView):
    summaries = {"GET": "Get an upstream link", "DELETE": "Remove an upstream link"}
    operation_ids = {"GET": "get_connection", "DELETE": "delete_connection"}
    required_scopes = {"GET": Scope.CALENDARS_READ, "DELETE": Scope.CALENDARS_WRITE}
    audit_action = "sync.connection"

    @extend_schema(responses={200: ConnectionOutput})
    def get(self, request: Request, connection_id: str) -> Response:
        return Response(connection_payload(connection_for(self.actor, connection_id)))

    @extend_schema(parameters=[DisconnectQuery], responses={204: None})
    def delete(self, request: Request, connection_id: str) -> Response:
        query = validated(DisconnectQuery, request.query_params.dict())
        connection_delete(
            actor=self.actor,
            connection=connection_for(self.actor, connection_id),
            remove_bookings=query["remove_bookings"],
        )
        return Response(status=204)


class ConnectionSyncView(AgentAPIView):
    summaries = {"POST": "Sync an upstream link now"}
    operation_ids = {"POST": "sync_connection"}
    required_scopes = {"POST": Scope.CALENDARS_WRITE}
    audit_action = "sync.connection"

    @extend_schema(request=None, responses={202: ConnectionOutput})
    def post(self, request: Request, connection_id: str) -> Response:
        connection = connection_for(self.actor, connection_id)
        request_sync(connection.pk)
        connection.refresh_from_db()
        return Response(connection_payload(connection), status=202)


# --- What `connection.failed` carries (built by sync.services.connection_data) ---


class ConnectionEventFields(OutputSerializer):
    id = serializers.CharField()
    calendar = serializers.CharField()
    provider = serializers.ChoiceField(choices=Provider.choices)
    url = serializers.CharField(help_text="CalDAV: the collection's URL (empty for OAuth providers).")
    status = serializers.ChoiceField(choices=ConnectionStatus.choices)


class ConnectionFailedOutput(OutputSerializer):
    connection = ConnectionEventFields()
    error = serializers.CharField(help_text="What the provider or the sync said (up to 500 characters).")
