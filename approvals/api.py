"""Agent API for approvals: request, read, list, cancel. Deciding is the dashboard's (a signed-in person);
there is no endpoint for it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import BoundedJSONField, OneLineField, OutputSerializer, StrictSerializer, validated
from agentcal.api.pagination import PageQuery
from agentcal.api.schema import page_of, problems
from agentcal.api.views import AgentAPIView
from agentcal.clock import server_now
from agentcal.pagination import paginate
from approvals import services
from approvals.events import approval_data
from approvals.models import SUMMARY_MAX_CHARS, Approval, ApprovalStatus
from workspaces.models import Scope


class ApprovalInput(StrictSerializer):
    summary = OneLineField(max_length=SUMMARY_MAX_CHARS)
    evidence = BoundedJSONField(expect=dict, max_bytes=services.EVIDENCE_MAX_BYTES)
    expires_in_seconds = serializers.IntegerField(
        min_value=services.MIN_EXPIRES_IN_SECONDS, max_value=services.MAX_EXPIRES_IN_SECONDS, required=False
    )
    hold_id = serializers.CharField(max_length=32, required=False)
    state = BoundedJSONField(
        expect=None,
        max_bytes=services.STATE_MAX_BYTES,
        required=False,
        allow_null=True,
        help_text="Opaque agent data, echoed back in the approval and its webhooks.",
    )


class ApprovalOutput(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=ApprovalStatus.choices)
    summary = serializers.CharField()
    evidence = serializers.JSONField()
    state = serializers.JSONField(allow_null=True)
    hold_id = serializers.CharField(allow_null=True)
    booking_id = serializers.CharField(
        allow_null=True, help_text="Set once an approved approval's hold has been committed."
    )
    booking_error = serializers.CharField(
        allow_blank=True,
        help_text='Why an approved hold could not be committed (e.g. "hold_evicted"); empty otherwise.',
    )
    agent_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_by = serializers.CharField(allow_null=True, help_text="Email of the person who decided.")
    decided_at = serializers.DateTimeField(allow_null=True)
    note = serializers.CharField(allow_blank=True)


def approval_payload(approval: Approval, now: datetime | None = None) -> dict[str, Any]:
    # The agent reads its evidence back in the order it wrote it (jsonb would sort the keys).
    return {**approval_data(approval, now=now), "evidence": approval.evidence_in_order}


class ApprovalListQuery(PageQuery):
    status = serializers.ChoiceField(choices=ApprovalStatus.choices, required=False)


class ApprovalListView(AgentAPIView):
    summaries = {"GET": "List approval requests", "POST": "Ask a person to approve an action"}
    operation_ids = {"GET": "list_approvals", "POST": "request_approval"}
    required_scopes = {"GET": Scope.APPROVALS_READ, "POST": Scope.APPROVALS_WRITE}
    audit_action = "approval"

    @extend_schema(parameters=[ApprovalListQuery], responses={200: page_of(ApprovalOutput)})
    def get(self, request: Request) -> Response:
        query = validated(ApprovalListQuery, request.query_params.dict())
        approvals = Approval.objects.filter(agent=self.actor.agent).select_related("agent")
        status = query.get("status")
        now = server_now()
        # Filter on the status as reads report it: an unswept expiry is `expired`, not `pending`.
        if status == ApprovalStatus.PENDING:
            approvals = approvals.filter(status=status, expires_at__gt=now)
        elif status == ApprovalStatus.EXPIRED:
            approvals = approvals.filter(
                Q(status=status) | Q(status=ApprovalStatus.PENDING, expires_at__lte=now)
            )
        elif status:
            approvals = approvals.filter(status=status)
        page, next_cursor = paginate(
            approvals,
            cursor=query.get("cursor"),
            limit=query["limit"],
            descending=True,
            scope=f"approvals:{self.actor.agent_public_id}:{status or ''}",
            key_field="public_id",
        )
        results = [ApprovalOutput(approval_payload(a, now)).data for a in page]
        return Response({"results": results, "next_cursor": next_cursor})

    @extend_schema(request=ApprovalInput, responses={201: ApprovalOutput, **problems(404)})
    def post(self, request: Request) -> Response:
        data = validated(ApprovalInput, request.data)
        approval = services.approval_request(
            actor=self.actor,
            summary=data["summary"],
            evidence=data["evidence"],
            expires_in_seconds=data.get("expires_in_seconds"),
            hold_id=data.get("hold_id"),
            state=data.get("state"),
        )
        return Response(
            ApprovalOutput(approval_payload(approval)).data,
            status=201,
            headers={"Location": f"/v1/approvals/{approval.public_id}"},
        )


class ApprovalDetailView(AgentAPIView):
    summaries = {"GET": "Get an approval request"}
    operation_ids = {"GET": "get_approval"}
    required_scopes = {"GET": Scope.APPROVALS_READ}
    audit_action = "approval"

    @extend_schema(responses={200: ApprovalOutput})
    def get(self, request: Request, approval_id: str) -> Response:
        approval = services.approval_for_agent(actor=self.actor, approval_id=approval_id)
        return Response(ApprovalOutput(approval_payload(approval, server_now())).data)


class ApprovalCancelView(AgentAPIView):
    summaries = {"POST": "Withdraw an approval request"}
    operation_ids = {"POST": "cancel_approval"}
    required_scopes = {"POST": Scope.APPROVALS_WRITE}
    audit_action = "approval.cancel"

    @extend_schema(request=None, responses={200: ApprovalOutput})
    def post(self, request: Request, approval_id: str) -> Response:
        approval = services.approval_cancel(actor=self.actor, approval_id=approval_id)
        return Response(ApprovalOutput(approval_payload(approval, server_now())).data)


# --- What approval events carry (approvals.events.approval_data; agentcal.api.event_catalog publishes) ---


class ApprovalEventFields(OutputSerializer):
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=ApprovalStatus.choices)
    summary = serializers.CharField()
    state = serializers.JSONField(allow_null=True, help_text="The agent's own data, echoed back.")
    hold_id = serializers.CharField(allow_null=True)
    booking_id = serializers.CharField(allow_null=True)
    booking_error = serializers.CharField(allow_blank=True)
    agent_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_by = serializers.CharField(allow_null=True, help_text="Email of the person who decided.")
    decided_at = serializers.DateTimeField(allow_null=True)
    note = serializers.CharField(allow_blank=True, help_text="What the person wrote with the decision.")


class ApprovalEventOutput(OutputSerializer):
    approval = ApprovalEventFields()
