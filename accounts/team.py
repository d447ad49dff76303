"""A workspace's team: inviting people by email with a role, changing roles, removing members.

Owners manage the team; anyone may leave. Every change is one transaction that starts by locking the
workspace's row, so each change sees the one before it and a workspace always keeps an owner. An
invitation is a row and a magic link that lives a week; its first use accepts it.

Design: docs/architecture.md, "A workspace's team".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from accounts.links import links_throttled_for, magic_link_issue, magic_link_url
from accounts.models import Invitation, MagicLink, Membership, Permission, Role
from accounts.people import normalize_email, person_get_or_create
from accounts.roles import ROLE_SUMMARIES
from accounts.time_zones import zone_for_email
from agentcal.errors import (
    AgentCalError,
    AlreadyMember,
    InvalidRequest,
    InvitationNotPending,
    InvitationPending,
    InvitationThrottled,
    LastOwner,
    NotFound,
    SignInFailed,
    TeamChangeNotAllowed,
)
from agentcal.moments import moment_text
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from workspaces.actor import Actor
from workspaces.models import Workspace

logger = logging.getLogger(__name__)

INVITATION_LINK_TTL = timedelta(days=7)


@dataclass(frozen=True)
class InvitationSent:
    invitation: Invitation
    emailed: bool  # False when the mail relay refused it: the invitation stands, and can be resent


# --- Under the workspace's lock ---------------------------------------------------------------------------


def _lock_team(workspace: Workspace) -> None:
    # FOR NO KEY UPDATE: serialises team changes without blocking the rows that merely reference the
    # workspace (audit rows, reservations), which take FOR KEY SHARE on it.
    Workspace.objects.select_for_update(no_key=True).filter(pk=workspace.pk).get()


def _membership_of(user: Any, workspace: Workspace) -> Membership | None:
    return Membership.objects.filter(user=user.pk, workspace=workspace).first()


def _require_team_manager(user: Any, workspace: Workspace) -> Membership:
    membership = _membership_of(user, workspace)
    if membership is None or not membership.may(Permission.MANAGE_TEAM):
        raise TeamChangeNotAllowed("Only owners invite people, change roles and remove members.")
    return membership


def _is_last_owner(membership: Membership) -> bool:
    """Whether the workspace would have no owner left who can sign in without this one."""
    if membership.role != Role.OWNER or not membership.user.is_active:
        return False
    owners = Membership.objects.filter(
        workspace=membership.workspace_id, role=Role.OWNER, user__is_active=True
    ).count()
    return owners <= 1


def _member(workspace: Workspace, membership_id: int) -> Membership:
    membership = (
        Membership.objects.select_related("user").filter(workspace=workspace, pk=membership_id).first()
    )
    if membership is None:
        raise NotFound("No such member in this workspace.")
    return membership


def _invitation(workspace: Workspace, invitation_id: int) -> Invitation:
    invitation = Invitation.objects.filter(workspace=workspace, pk=invitation_id).first()
    if invitation is None:
        raise NotFound("No such invitation in this workspace.")
    return invitation


def _valid_role(role: str) -> str:
    if role not in Role.values:
        raise InvalidRequest(f"Choose a role: {', '.join(Role.values)}.")
    return role


def _audit_refusal(actor: Actor, event: AuditEvent, exc: AgentCalError, details: dict[str, Any]) -> None:
    with transaction.atomic():
        audit_record(
            event_type=event,
            outcome=Outcome.REJECTED,
            actor=actor,
            http_status=exc.status,
            failure_reason=exc.code,
            details=details,
        )
    exc.audited = True


# --- Invitations --------------------------------------------------------------------------------------------


def invitation_create(*, actor: Actor, by: Any, email: str, role: str) -> InvitationSent:
    """Invite `email` to the actor's workspace as `role`, and email them the link. `by` is the person
    acting (an owner)."""
    email = normalize_email(email)
    try:
        validate_email(email)
    except ValidationError as exc:
        raise InvalidRequest(f"{email!r} is not an email address.") from exc
    role = _valid_role(role)
    workspace = actor.workspace
    with transaction.atomic(durable=True):
        _lock_team(workspace)
        _require_team_manager(by, workspace)
        if Membership.objects.filter(workspace=workspace, user__email__iexact=email).exists():
            raise AlreadyMember(f"{email} is already a member of {workspace.name}.")
        if Invitation.objects.filter(
            workspace=workspace, email=email, accepted_at__isnull=True, revoked_at__isnull=True
        ).exists():
            raise InvitationPending(f"{email} is already invited: resend or revoke that invitation.")
        invitation = Invitation.objects.create(
            workspace=workspace,
            email=email,
            role=role,
            invited_by_email=actor.user_email,
            sent_at=timezone.now(),
        )
        token = magic_link_issue(email=email, invitation=invitation, ttl=INVITATION_LINK_TTL)
        audit_record(
            event_type=AuditEvent.TEAM_INVITATION_CREATED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            details={"invitation_id": invitation.pk, "email": email, "role": role},
        )
    return InvitationSent(invitation=invitation, emailed=_send_invitation(invitation, token))


def invitation_resend(*, actor: Actor, by: Any, invitation_id: int) -> InvitationSent:
    """Email a pending invitation again with a fresh link; the links sent before stop working."""
    workspace = actor.workspace
    with transaction.atomic(durable=True):
        _lock_team(workspace)
        _require_team_manager(by, workspace)
        invitation = _invitation(workspace, invitation_id)
        if not invitation.is_pending:
            raise InvitationNotPending(
                f"The invitation of {invitation.email} was already accepted or revoked."
            )
        # The same per-address throttle as sign-in links: an owner's button must not become a mail bomb.
        if links_throttled_for(invitation.email):
            raise InvitationThrottled(
                f"Several links went to {invitation.email} in the last few minutes; try again later."
            )
        _retire_links(invitation)
        token = magic_link_issue(email=invitation.email, invitation=invitation, ttl=INVITATION_LINK_TTL)
        invitation.sent_at = timezone.now()
        invitation.save(update_fields=["sent_at"])
        audit_record(
            event_type=AuditEvent.TEAM_INVITATION_RESENT,
            outcome=Outcome.SUCCESS,
            actor=actor,
            details={"invitation_id": invitation.pk, "email": invitation.email, "role": invitation.role},
        )
    return InvitationSent(invitation=invitation, emailed=_send_invitation(invitation, token))


def invitation_revoke(*, actor: Actor, by: Any, invitation_id: int) -> Invitation:
    """Withdraw a pending invitation: every link sent for it stops working."""
    workspace = actor.workspace
    with transaction.atomic(durable=True):
        _lock_team(workspace)
        _require_team_manager(by, workspace)
        invitation = _invitation(workspace, invitation_id)
        revoked = Invitation.objects.filter(
            pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True
        ).update(revoked_at=Now())
        if revoked != 1:
            raise InvitationNotPending(
                f"The invitation of {invitation.email} was already accepted or revoked."
            )
        _retire_links(invitation)
        audit_record(
            event_type=AuditEvent.TEAM_INVITATION_REVOKED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            details={"invitation_id": invitation.pk, "email": invitation.email, "role": invitation.role},
        )
    invitation.refresh_from_db()
    return invitation


def invitation_accept(*, invitation_id: int) -> Membership:
    """Accept an invitation whose link has just been used (accounts.services.magic_link_redeem, inside
    its transaction): the person (created when new) joins with the invited role. Someone who became a
    member meanwhile keeps the role they have: a link never demotes, nor promotes over an owner's later
    choice."""
    with transaction.atomic(savepoint=False):
        invitation = Invitation.objects.select_related("workspace").get(pk=invitation_id)
        workspace = invitation.workspace
        _lock_team(workspace)
        accepted = Invitation.objects.filter(
            pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True
        ).update(accepted_at=Now())
        if accepted != 1:
            raise SignInFailed(
                "This invitation was withdrawn or already accepted. Ask whoever invited you for a new one."
            )
        user = person_get_or_create(email=invitation.email)
        if not user.is_active:
            raise SignInFailed("This sign-in link has expired or was already used. Ask for a new one.")
        membership, joined = Membership.objects.select_related("user", "workspace").get_or_create(
            user=user, workspace=workspace, defaults={"role": invitation.role}
        )
        audit_record(
            event_type=AuditEvent.TEAM_INVITATION_ACCEPTED,
            outcome=Outcome.SUCCESS,
            actor=Actor(workspace=workspace, agent=None, user_email=user.email),
            details={
                "invitation_id": invitation.pk,
                "email": user.email,
                "role": membership.role,
                "invited_role": invitation.role,
                "invited_by": invitation.invited_by_email,
                "already_member": not joined,
            },
        )
    return membership


def _retire_links(invitation: Invitation) -> None:
    # Marked used rather than deleted: the per-address throttle counts recent links.
    MagicLink.objects.filter(invitation=invitation, used_at__isnull=True).update(used_at=Now())


def role_with_article(role: str) -> str:
    label = Role(role).label.lower()
    return f"{'an' if label[0] in 'aeiou' else 'a'} {label}"


def _send_invitation(invitation: Invitation, token: str) -> bool:
    """Email the invitation; a relay failure is logged and reported, never raised (the owner resends)."""
    workspace = invitation.workspace
    expires = moment_text(invitation.sent_at + INVITATION_LINK_TTL, zone_for_email(invitation.email))
    try:
        send_mail(
            subject=f"{invitation.invited_by_email} invited you to {workspace.name} on AgentCal",
            message=(
                f"{invitation.invited_by_email} invited you to join the workspace {workspace.name} on "
                f"AgentCal as {role_with_article(invitation.role)}: {ROLE_SUMMARIES[invitation.role]}\n\n"
                f"Open this link to accept and sign in. It works once and expires in "
                f"{INVITATION_LINK_TTL.days} days ({expires}):\n\n{magic_link_url(token)}\n\n"
                "Then add a passkey: it signs you in from then on. If you did not expect this invitation, "
                "ignore this email."
            ),
            from_email=None,
            recipient_list=[invitation.email],
        )
    except Exception:
        logger.exception("could not email an invitation to workspace %s", workspace.slug)
        return False
    return True


# --- Members ------------------------------------------------------------------------------------------------


def member_role_change(*, actor: Actor, by: Any, membership_id: int, role: str) -> Membership:
    """Give a member another role. The last owner keeps theirs (LastOwner)."""
    role = _valid_role(role)
    workspace = actor.workspace
    details: dict[str, Any] = {"membership_id": membership_id, "role": role}
    try:
        with transaction.atomic(durable=True):
            _lock_team(workspace)
            _require_team_manager(by, workspace)
            member = _member(workspace, membership_id)
            details.update(email=member.user.email, previous_role=member.role)
            if member.role == role:
                return member
            if role != Role.OWNER and _is_last_owner(member):
                raise LastOwner(
                    f"{member.user.email} is the only owner of {workspace.name}: make someone else an "
                    "owner first."
                )
            member.role = role
            member.save(update_fields=["role"])
            audit_record(
                event_type=AuditEvent.TEAM_MEMBER_ROLE_CHANGED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                details=details,
            )
            return member
    except (LastOwner, TeamChangeNotAllowed) as exc:
        _audit_refusal(actor, AuditEvent.TEAM_MEMBER_ROLE_CHANGE_REJECTED, exc, details)
        raise


def member_remove(*, actor: Actor, by: Any, membership_id: int) -> Membership:
    """Remove a member (an owner acting), or leave (anyone, their own membership). The last owner
    stays (LastOwner). Returns the removed membership, unsaved."""
    workspace = actor.workspace
    details: dict[str, Any] = {"membership_id": membership_id}
    try:
        with transaction.atomic(durable=True):
            _lock_team(workspace)
            member = _member(workspace, membership_id)
            leaving = member.user_id == by.pk
            if not leaving:
                _require_team_manager(by, workspace)
            details.update(email=member.user.email, role=member.role, left=leaving)
            if _is_last_owner(member):
                who = "You are" if leaving else f"{member.user.email} is"
                raise LastOwner(
                    f"{who} the only owner of {workspace.name}: make someone else an owner first."
                )
            member.delete()
            audit_record(
                event_type=AuditEvent.TEAM_MEMBER_REMOVED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                details=details,
            )
            return member
    except (LastOwner, TeamChangeNotAllowed) as exc:
        _audit_refusal(actor, AuditEvent.TEAM_MEMBER_REMOVE_REJECTED, exc, details)
        raise
