"""GET /v1/audit: the workspace's audit trail, newest first, with read-time retention."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import OffsetDateTimeField
from agentcal.api.pagination import PageQuery
from agentcal.api.schema import page_of
from agentcal.api.views import AgentAPIView
from agentcal.errors import InvalidRange
from agentcal.event_patterns import matches
from agentcal.pagination import paginate
from audit.events import AuditEvent
from audit.models import AuditRecord, Outcome
from audit.selectors import audit_records
from workspaces.models import Scope


class AuditQuery(PageQuery):
    event_type = serializers.CharField(
        required=False,
        max_length=64,
        help_text="An event type (`calendar.hold.created`) or a family of them (`calendar.hold.*`); one the "
        "trail never records is refused with 400.",
    )
    agent = serializers.CharField(required=False, max_length=32)
    calendar = serializers.CharField(required=False, max_length=32)
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False)
    since = OffsetDateTimeField(required=False)
    until = OffsetDateTimeField(required=False)
    overlaps_start = OffsetDateTimeField(required=False)
    overlaps_end = OffsetDateTimeField(required=False)

    def validate_event_type(self, value: str) -> str:
        # A type the server never records, or a family with none, would answer an empty page an agent reads
        # as "nothing happened": a typo is said instead.
        if not any(matches(value, event) for event in AuditEvent.values):
            raise serializers.ValidationError(
                "Not an event type the audit trail records, nor a family of them (`calendar.hold.*`)."
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A range that ends before it starts selects nothing: said (as every range is, `invalid_range`),
        # rather than an empty page an agent would read as "nothing happened".
        for first, last in (("since", "until"), ("overlaps_start", "overlaps_end")):
            if first in attrs and last in attrs and attrs[last] < attrs[first]:
                raise InvalidRange(f"{last} must not be before {first}.")
        return attrs


class AuditRecordOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    timestamp = serializers.DateTimeField()
    event_type = serializers.CharField()
    outcome = serializers.ChoiceField(choices=Outcome.choices)
    workspace_id = serializers.SerializerMethodField()
    agent_id = serializers.CharField(source="agent_public_id")
    actor_user = serializers.CharField()
    auth_key_prefix = serializers.CharField()
    calendar = serializers.CharField(source="calendar_public_id")
    reservation = serializers.CharField(source="reservation_public_id")
    requested_range = serializers.SerializerMethodField()
    http_status = serializers.IntegerField(allow_null=True)
    failure_reason = serializers.CharField()
    conflict_details = serializers.JSONField(allow_null=True)
    fencing_token = serializers.IntegerField(allow_null=True)
    request_id = serializers.CharField()
    details = serializers.JSONField()

    def get_workspace_id(self, record: AuditRecord) -> str:
        return self.context["workspace_public_id"]

    def get_requested_range(self, record: AuditRecord) -> dict[str, Any] | None:
        if record.requested_start is None or record.requested_end is None:
            return None
        field = serializers.DateTimeField()
        return {
            "start_time": field.to_representation(record.requested_start),
            "end_time": field.to_representation(record.requested_end),
        }


class AuditListView(AgentAPIView):
    summaries = {"GET": "List the workspace's audit trail"}
    operation_ids = {"GET": "list_audit_records"}
    required_scopes = {"GET": Scope.AUDIT_READ}
    audit_action = "audit.read"

    @extend_schema(parameters=[AuditQuery], responses={200: page_of(AuditRecordOutput)})
    def get(self, request: Request) -> Response:
        validator = AuditQuery(data=request.query_params.dict())
        validator.is_valid(raise_exception=True)
        query = validator.validated_data
        workspace = self.actor.workspace
        filter_names = (
            "event_type",
            "agent",
            "calendar",
            "outcome",
            "since",
            "until",
            "overlaps_start",
            "overlaps_end",
        )
        records = audit_records(workspace=workspace, **{k: query[k] for k in filter_names if k in query})
        filters = {k: str(v) for k, v in sorted(query.items()) if k not in ("cursor", "limit")}
        page, next_cursor = paginate(
            records,
            cursor=query.get("cursor"),
            limit=query["limit"],
            descending=True,
            scope=f"audit:{filters}",
            key_field="public_id",
        )
        context = {"workspace_public_id": workspace.public_id}
        return Response(
            {"results": AuditRecordOutput(page, many=True, context=context).data, "next_cursor": next_cursor}
        )
