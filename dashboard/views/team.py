"""The workspace's team: its members and their roles, pending invitations, and what each role may do.

Every member sees the page (who is on the team, and the roles explainer, which reads the permission
table itself so it cannot drift from what the pages enforce); owners invite, resend, revoke, change
roles and remove; anyone may leave. The rules — owners only, the last owner stays — live in
accounts.team, under a lock; the page only hides what a role cannot use.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.models import Membership
from accounts.roles import GRANTS, ROLE_SUMMARIES, Permission, Role
from accounts.selectors import link_expiries, open_invitations, workspace_members
from accounts.team import (
    INVITATION_LINK_TTL,
    InvitationSent,
    invitation_create,
    invitation_resend,
    invitation_revoke,
    member_remove,
    member_role_change,
    role_with_article,
)
from agentcal.errors import (
    AlreadyMember,
    InvalidRequest,
    InvitationNotPending,
    InvitationPending,
    InvitationThrottled,
    LastOwner,
    NotFound,
    TeamChangeNotAllowed,
)
from dashboard.access import page_context, workspace_page
from dashboard.http import DashboardRequest
from workspaces.models import Workspace

ROLE_ORDER = {role: rank for rank, role in enumerate(Role.values)}  # owners first


class InviteForm(forms.Form):
    email = forms.EmailField(max_length=254)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


def _member_row(
    member: Membership, request: DashboardRequest, *, manages: bool, owners: int
) -> dict[str, Any]:
    is_you = member.user_id == request.user.pk
    is_last_owner = member.role == Role.OWNER and member.user.is_active and owners <= 1
    return {
        "membership": member,
        "is_you": is_you,
        "is_last_owner": is_last_owner,
        # Leave (or why not) on your own row; Remove on others' for owners, but never the last owner.
        "has_actions": is_you or (manages and not is_last_owner),
    }


def _render_team(
    request: DashboardRequest, workspace: Workspace, *, form: InviteForm | None = None, status: int = 200
) -> HttpResponse:
    members = sorted(
        workspace_members(workspace),
        key=lambda m: (ROLE_ORDER.get(m.role, len(ROLE_ORDER)), m.user.email),
    )
    owners = sum(1 for m in members if m.role == Role.OWNER and m.user.is_active)
    manages = request.membership.may(Permission.MANAGE_TEAM)
    invitations = open_invitations(workspace) if manages else []
    # Until when each invitation's newest unused link works; none left means the owner should resend.
    link_expires_at = link_expiries(invitations)
    now = timezone.now()  # only for display: whether to offer a fresh link
    context = page_context(
        request,
        "team",
        page_url=reverse("dashboard:team", args=[workspace.slug]),
        members=[_member_row(m, request, manages=manages, owners=owners) for m in members],
        invitations=[
            {
                "invitation": invitation,
                "link_expires_at": link_expires_at.get(invitation.pk),
                "link_live": link_expires_at.get(invitation.pk, now) > now,
            }
            for invitation in invitations
        ],
        your_role=role_with_article(request.membership.role),
        manages_team=manages,
        form=form or InviteForm(),
        roles=Role.choices,
        role_summaries=[
            {
                "label": label,
                "summary": ROLE_SUMMARIES[role],
                "may": [permission.label for permission in Permission if permission in GRANTS[role]],
            }
            for role, label in Role.choices
        ],
        role_grid=[
            {"label": permission.label, "grants": [permission in GRANTS[role] for role in Role.values]}
            for permission in Permission
        ],
        link_days=INVITATION_LINK_TTL.days,
    )
    return render(request, "dashboard/team/team.html", context, status=status)


@workspace_page()
def team(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    return _render_team(request, workspace)


def _announce(request: DashboardRequest, sent: InvitationSent, verb: str) -> None:
    invitation = sent.invitation
    if sent.emailed:
        messages.success(
            request,
            f"{verb} {invitation.email} as {invitation.role}. The link in the email works once, for "
            f"{INVITATION_LINK_TTL.days} days.",
        )
    else:
        messages.error(
            request,
            f"The invitation of {invitation.email} is saved, but the email could not be sent. "
            "Check the mail relay, then resend it.",
        )


@require_POST
@workspace_page(needs=Permission.MANAGE_TEAM)
def invite(request: DashboardRequest, workspace: Workspace) -> HttpResponse:
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _render_team(request, workspace, form=form, status=400)
    try:
        sent = invitation_create(
            actor=request.actor,
            by=request.user,
            email=form.cleaned_data["email"],
            role=form.cleaned_data["role"],
        )
    except (AlreadyMember, InvitationPending, InvalidRequest) as exc:
        form.add_error("email", exc.detail)
        return _render_team(request, workspace, form=form, status=exc.status)
    _announce(request, sent, "Invited")
    return redirect("dashboard:team", workspace.slug)


@require_POST
@workspace_page(needs=Permission.MANAGE_TEAM)
def invitation_send_again(
    request: DashboardRequest, workspace: Workspace, invitation_id: int
) -> HttpResponse:
    try:
        sent = invitation_resend(actor=request.actor, by=request.user, invitation_id=invitation_id)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    except (InvitationNotPending, InvitationThrottled) as exc:
        messages.error(request, exc.detail)
    else:
        _announce(request, sent, "Sent a new link to")
    return redirect("dashboard:team", workspace.slug)


@require_POST
@workspace_page(needs=Permission.MANAGE_TEAM)
def invitation_withdraw(request: DashboardRequest, workspace: Workspace, invitation_id: int) -> HttpResponse:
    try:
        invitation = invitation_revoke(actor=request.actor, by=request.user, invitation_id=invitation_id)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    except InvitationNotPending as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Revoked the invitation of {invitation.email}: its links no longer work.")
    return redirect("dashboard:team", workspace.slug)


@require_POST
@workspace_page(needs=Permission.MANAGE_TEAM)
def member_role(request: DashboardRequest, workspace: Workspace, membership_id: int) -> HttpResponse:
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Choose a role: {', '.join(Role.values)}.")
        return redirect("dashboard:team", workspace.slug)
    try:
        member = member_role_change(
            actor=request.actor, by=request.user, membership_id=membership_id, role=form.cleaned_data["role"]
        )
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    except (LastOwner, TeamChangeNotAllowed) as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"{member.user.email} is now {member.role}.")
        if member.user_id == request.user.pk and not member.may(Permission.MANAGE_TEAM):
            messages.info(request, "You no longer manage the team.")
    return redirect("dashboard:team", workspace.slug)


@require_POST
@workspace_page()
def member_leave_or_remove(
    request: DashboardRequest, workspace: Workspace, membership_id: int
) -> HttpResponse:
    """Anyone may post their own membership here (leaving); removing someone else takes an owner, which
    accounts.team checks under its lock."""
    try:
        member = member_remove(actor=request.actor, by=request.user, membership_id=membership_id)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    except TeamChangeNotAllowed as exc:
        raise PermissionDenied(exc.detail) from exc
    except LastOwner as exc:
        messages.error(request, exc.detail)
        return redirect("dashboard:team", workspace.slug)
    if member.user_id == request.user.pk:
        messages.success(request, f"You left {workspace.name}.")
        return redirect("dashboard:home")
    messages.success(request, f"Removed {member.user.email} from {workspace.name}.")
    return redirect("dashboard:team", workspace.slug)
