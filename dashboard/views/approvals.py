"""The approval queue and one approval's page: what the agent asks, what approving would do, live state.

The queue, the sidebar's pending count and an open approval stay current by htmx polling; a poll sends
what it last saw and gets 204 while nothing changed, so a half-typed note is never swapped away.

Design: docs/architecture.md, "The dashboard".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Membership, Permission
from agentcal.clock import server_now
from agentcal.errors import ApprovalAlreadyDecided, ApprovalExpired
from agentcal.text import is_storable, storable_text
from approvals.models import NOTE_MAX_CHARS, Approval
from approvals.selectors import pending_count
from approvals.services import approval_decide
from bookings.selectors import hold_primary
from dashboard.access import page_context, workspace_page
from dashboard.http import THREAD_PAGE_POLICY, DashboardRequest
from dashboard.lookups import approval_in
from dashboard.viewmodels.approval_detail import (
    approval_subject,
    bump_window_words,
    live_state,
)
from dashboard.viewmodels.approval_queue import queue_rows
from dashboard.viewmodels.decision_words import decision_sentence, with_decisions
from dashboard.viewmodels.gated_booking import GatedBooking
from workspaces.models import Workspace

QUEUE_POLL_SECONDS = 5
DETAIL_POLL_SECONDS = 5


def may_decide(membership: Membership) -> bool:
    """Who may approve or deny: the role table's answer (accounts.roles)."""
    return membership.may(Permission.DECIDE_APPROVALS)


# --- The queue ----------------------------------------------------------------------------------------------


@workspace_page()
def queue(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """Pending newest first, plus recent decisions. htmx polls the table partial to stay live."""
    pending, recent = queue_rows(workspace)
    recent = with_decisions(workspace, recent)
    template = "dashboard/approvals/queue.html"
    if request.htmx:
        template += "#queue-table"
    context = page_context(
        request, "approvals", pending=pending, recent=recent, poll_seconds=QUEUE_POLL_SECONDS
    )
    return render(request, template, context)


@require_GET
@workspace_page()
def pending_badge(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    """The sidebar's pending count, polled by every page (base.html); app.js copies it into the tab title.

    One indexed count per poll; `?shown=N` answers 204 while the count is still N, so nothing is swapped.
    """
    count = pending_count(workspace)
    if request.GET.get("shown") == str(count):
        response = HttpResponse(status=204)
    else:
        response = render(
            request, "dashboard/approvals/_badge.html", {"workspace": workspace, "pending_count": count}
        )
    add_never_cache_headers(response)
    return response


# --- One approval: the page and its live parts --------------------------------------------------------------


def live_context(
    request: DashboardRequest, workspace: Workspace, approval: Approval, now: datetime
) -> dict[str, Any]:
    return live_state(
        workspace=workspace,
        approval=approval,
        now=now,
        can_decide=may_decide(request.membership),
        poll_seconds=DETAIL_POLL_SECONDS,
    )


@workspace_page()
def detail(request: DashboardRequest, workspace: Workspace, approval_id: str) -> HttpResponse:
    """The page, or (`?live=1`, htmx's poll) only what changed since the keys it sends: 204 if nothing."""
    approval = approval_in(workspace, approval_id)
    if request.htmx and request.GET.get("live"):
        return live_update(request, workspace, approval)
    return render_detail(request, workspace, approval)


def live_update(request: DashboardRequest, workspace: Workspace, approval: Approval) -> HttpResponse:
    now = server_now()
    live = live_context(request, workspace, approval, now)
    decision_changed = request.GET.get("decision") != live["decision_key"]
    booking_changed = request.GET.get("booking") != live["booking_key"]
    if not (decision_changed or booking_changed):
        response = HttpResponse(status=204)
    else:
        context = {
            **live,
            "workspace": workspace,
            "membership": request.membership,
            "decision_changed": decision_changed,
            "booking_changed": booking_changed,
            "pending_count": pending_count(workspace),
        }
        response = render(request, "dashboard/approvals/_live.html", context)
    add_never_cache_headers(response)
    return response


def render_detail(
    request: DashboardRequest,
    workspace: Workspace,
    approval: Approval,
    *,
    confirm: str = "",
    note: str = "",
    note_error: str = "",
) -> HttpResponse:
    now = server_now()
    subject = approval_subject(approval, request.membership)
    live = live_context(request, workspace, approval, now)
    booking: GatedBooking | None = live["booking"]
    context = page_context(
        request,
        "approvals",
        page_url=reverse("dashboard:approval", args=[workspace.slug, approval.public_id]),
        **live,
        **subject,
        bump_window=bump_window_words(booking.primary.calendar.bump_window_seconds) if booking else "",
        confirm=confirm,
        note=note,
        note_error=note_error,
    )
    response = render(request, "dashboard/approvals/detail.html", context)
    # The page shows agent-written content, and an email draft may quote a stranger's mail: the inbox
    # thread page's stricter policy applies here too.
    response["Content-Security-Policy"] = THREAD_PAGE_POLICY
    return response


@require_POST
@workspace_page()
def decide(request: DashboardRequest, workspace: Workspace, approval_id: str) -> HttpResponse:
    """Approve or deny, in two steps: the first POST shows what will happen and asks to confirm; only the
    second (`confirmed=yes`) decides.

    A confirm step rather than an undo window. A decision takes effect at once: approving commits the
    booking and the agent is told (webhook) in the same moment, and it may act on it straight away (send
    the invites, tell the customer); an approved email goes to the relay. An "undo" after that would be a
    lie: it could only cancel a booking the agent had already announced, or chase an email already sent.
    An honest undo would have to hold the decision back from everyone for the window (the agent waiting,
    the hold's pin running down, a second person seeing it still pending and deciding too) and apply it
    later from a worker. Confirming first states exactly what will happen before anything does, and the
    decision is then final, as the agent is told.
    """
    if not may_decide(request.membership):
        raise PermissionDenied("Your role can read approvals but not decide them.")
    approval = approval_in(workspace, approval_id)  # 404 before anything else
    decision = request.POST.get("decision")
    note = request.POST.get("note", "")
    if request.POST.get("back"):
        return render_detail(request, workspace, approval, note=note)
    if decision not in {"approve", "deny"}:
        messages.error(request, "Choose approve or deny.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    if len(note) > NOTE_MAX_CHARS:
        error = f"The note may be at most {NOTE_MAX_CHARS} characters (it has {len(note)})."
        return render_detail(request, workspace, approval, note=note, note_error=error)
    if not is_storable(note):
        # Kept for editing with the character marked (U+FFFD), as no note can be stored with it.
        error = "The note holds a character that cannot be saved (shown as �): remove it."
        return render_detail(
            request, workspace, approval, note=storable_text(note, len(note)), note_error=error
        )
    if request.POST.get("confirmed") != "yes":
        return render_detail(request, workspace, approval, confirm=decision, note=note)
    try:
        approval = approval_decide(
            approval_id=approval_id,
            workspace=workspace,
            user=request.user,
            approve=decision == "approve",
            note=note,
        )
    except ApprovalAlreadyDecided as exc:
        who = exc.decided_by_email or "someone else"
        messages.error(request, f"Already {exc.approval_status} by {who} — your decision was not applied.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    except ApprovalExpired:
        messages.error(request, "This request expired before it was decided; the agent has been told.")
        return redirect("dashboard:approval", workspace.slug, approval_id)
    reservation = hold_primary(workspace, approval.hold_id) if approval.hold_id else None
    # Safe HTML (every part escaped by format_html): the message storage keeps it marked safe.
    messages.success(request, decision_sentence(workspace, approval, reservation))
    return redirect("dashboard:approvals", workspace.slug)
