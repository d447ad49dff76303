"""The approval queue: pending requests, a readable detail view, and race-safe decisions."""

from __future__ import annotations

from django.contrib import messages
from django.db.models.functions import Now
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from agentcal.errors import ApprovalAlreadyDecided, ApprovalExpired
from approvals.models import Approval
from approvals.services import approval_decide
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from workspaces.models import Workspace

QUEUE_POLL_SECONDS = 5
RECENT_DECISIONS = 20


@workspace_page()
def queue(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Pending newest first, plus recent decisions. htmx polls the table partial to stay live."""
    pending = (
        Approval.objects.filter(workspace=workspace, status="pending", expires_at__gt=Now())
        .select_related("agent")
        .order_by("-created_at")
    )
    recent = (
        Approval.objects.filter(workspace=workspace)
        .exclude(status="pending", expires_at__gt=Now())
        .select_related("agent")
        .order_by("-created_at")[:RECENT_DECISIONS]
    )
    template = "dashboard/approvals/queue.html"
    if request.htmx:
        template += "#queue-table"
    context = page_context(
        request, "approvals", pending=pending, recent=recent, poll_seconds=QUEUE_POLL_SECONDS
    )
    return render(request, template, context)


def _approval(workspace: Workspace, approval_id: str) -> Approval:
    approval = (
        Approval.objects.select_related("agent").filter(workspace=workspace, public_id=approval_id).first()
    )
    if approval is None:
        raise Http404("No such approval")
    return approval


@workspace_page()
def detail(request: DashboardRequest, workspace: Workspace, approval_id: str) -> HttpResponse:
    approval = _approval(workspace, approval_id)
    return render(
        request, "dashboard/approvals/detail.html", page_context(request, "approvals", approval=approval)
    )


@require_POST
@workspace_page()
def decide(request: DashboardRequest, workspace: Workspace, approval_id: str) -> HttpResponse:
    decision = request.POST.get("decision")
    if decision not in {"approve", "deny"}:
        messages.error(request, "Choose approve or deny.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    _approval(workspace, approval_id)  # 404 before anything else
    try:
        approval = approval_decide(
            approval_id=approval_id,
            workspace=workspace,
            user=request.user,
            approve=decision == "approve",
            note=request.POST.get("note", "")[:2000],
        )
    except ApprovalAlreadyDecided as exc:
        who = exc.decided_by_email or "someone else"
        messages.error(request, f"Already {exc.approval_status} by {who} — your decision was not applied.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    except ApprovalExpired:
        messages.error(request, "This request expired before it was decided; the agent has been told.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    verb = "Approved" if approval.status == "approved" else "Denied"
    note = f" The booking could not be made: {approval.booking_error}." if approval.booking_error else ""
    messages.success(request, f"{verb}: {approval.summary}.{note}")
    return redirect("dashboard:approvals", workspace.slug)
