from __future__ import annotations

from django.db import models


class AuditEvent(models.TextChoices):
    """Every audited action. Rejections of an action are `<action>.rejected`."""

    AUTH_REJECTED = "auth.rejected"
    REQUEST_REJECTED = "request.rejected"
    # Refused reads and the API's other refusals, named by their view's `audit_action` (`<action>.rejected`).
    AUDIT_READ_REJECTED = "audit.read.rejected"
    AVAILABILITY_REJECTED = "calendar.availability.rejected"
    BOOKING_REJECTED = "calendar.booking.rejected"
    BOOKINGS_REJECTED = "calendar.bookings.rejected"
    INBOX_REJECTED = "inbox.rejected"
    WEBHOOK_ENDPOINT_REJECTED = "webhook.endpoint.rejected"
    WEBHOOK_DELIVERY_REJECTED = "webhook.delivery.rejected"
    WEBHOOK_DELIVERY_REPLAY_REJECTED = "webhook.delivery.replay.rejected"
    WEBHOOK_EVENTS_REJECTED = "webhook.events.rejected"
    CALENDAR_CREATED = "calendar.created"
    CALENDAR_UPDATED = "calendar.updated"
    CALENDAR_REJECTED = "calendar.rejected"
    HOLD_CREATED = "calendar.hold.created"
    HOLD_REJECTED = "calendar.hold.rejected"
    HOLD_EXTENDED = "calendar.hold.extended"
    HOLD_EXTEND_REJECTED = "calendar.hold.extend.rejected"
    HOLD_RELEASED = "calendar.hold.released"
    HOLD_RELEASE_REJECTED = "calendar.hold.release.rejected"
    HOLD_EXPIRED = "calendar.hold.expired"
    HOLD_EVICTED = "calendar.hold.evicted"
    COMMIT_CREATED = "calendar.commit.created"
    COMMIT_REJECTED = "calendar.commit.rejected"
    BOOKING_BUMPED = "calendar.booking.bumped"
    BOOKING_CANCELLED = "calendar.booking.cancelled"
    BOOKING_CANCEL_REJECTED = "calendar.booking.cancel.rejected"
    BOOKING_MOVED = "calendar.booking.moved"
    BOOKING_MOVE_REJECTED = "calendar.booking.move.rejected"
    # A person's own (synced) calendar put an event over a committed booking, or moved it away again.
    BOOKING_UPSTREAM_CONFLICT = "calendar.booking.upstream_conflict"
    BOOKING_UPSTREAM_CONFLICT_RESOLVED = "calendar.booking.upstream_conflict.resolved"
    # An attendee's REPLY to the booking's invite, applied to the booking; or recorded but not applied
    # (not sent by that attendee, an outdated invite, ...).
    BOOKING_ATTENDEE_RESPONDED = "calendar.booking.attendee_responded"
    BOOKING_ATTENDEE_RESPONSE_REJECTED = "calendar.booking.attendee_response.rejected"
    CONNECTION_CREATED = "sync.connection.created"
    CONNECTION_REJECTED = "sync.connection.rejected"
    CONNECTION_DELETED = "sync.connection.deleted"
    CONNECTION_FAILED = "sync.connection.failed"
    CONNECTION_RECOVERED = "sync.connection.recovered"
    PUSH_REJECTED = "sync.push.rejected"
    # Mail for an agent's inbox: accepted and parsed, or refused at the SMTP dialogue (unknown recipient).
    INBOX_MESSAGE_RECEIVED = "inbox.message.received"
    INBOX_MESSAGE_REFUSED = "inbox.message.refused"
    # An inbound-webhook POST refused before its recipients were looked at (signature, timestamp, size).
    INBOX_WEBHOOK_REJECTED = "inbox.webhook.rejected"
    INBOX_MESSAGE_QUEUED = "inbox.message.queued"
    # A send refused (over a quota); a review-first draft waiting for a person, and one never sent because
    # the person denied it (or the approval expired or was cancelled).
    INBOX_MESSAGE_REJECTED = "inbox.message.rejected"
    INBOX_MESSAGE_AWAITING_APPROVAL = "inbox.message.awaiting_approval"
    INBOX_MESSAGE_DISCARDED = "inbox.message.discarded"
    INBOX_MESSAGE_SENT = "inbox.message.sent"
    INBOX_MESSAGE_FAILED = "inbox.message.failed"
    # An organizer's CANCEL for an invite linked to the agent's hold or booking (which stays as it is);
    # the CANCEL the agent's own invite sent out once its booking ended.
    INBOX_INVITE_CANCELLED_BY_ORGANIZER = "inbox.invite.cancelled_by_organizer"
    INBOX_INVITE_CANCELLED = "inbox.invite.cancelled"
    # The update (same UID, SEQUENCE + 1, the new times) the agent's own invite sent out once its booking
    # moved.
    INBOX_INVITE_UPDATED = "inbox.invite.updated"
    WEBHOOK_ENDPOINT_CREATED = "webhook.endpoint.created"
    WEBHOOK_ENDPOINT_DISABLED = "webhook.endpoint.disabled"
    WEBHOOK_DELIVERY_REPLAYED = "webhook.delivery.replayed"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_REJECTED = "approval.rejected"
    APPROVAL_APPROVED = "approval.approved"
    APPROVAL_DENIED = "approval.denied"
    APPROVAL_DECIDE_REJECTED = "approval.decide.rejected"
    APPROVAL_SETTLED = "approval.settled"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_CANCELLED = "approval.cancelled"
    APPROVAL_CANCEL_REJECTED = "approval.cancel.rejected"
    # Dashboard administration by a signed-in person (actor_user); the agent concerned is in details.
    AGENT_CREATED = "agent.created"
    AGENT_UPDATED = "agent.updated"
    # Disabled: every key of the agent is refused and mail to its address bounces; enabled: both work again.
    AGENT_DISABLED = "agent.disabled"
    AGENT_ENABLED = "agent.enabled"
    # The emergency stop, by an owner (dashboard) or ops (management command): a paused agent's writes are
    # refused with 423 until it is resumed; pausing the workspace stops every agent of it at once.
    AGENT_PAUSED = "agent.paused"
    AGENT_RESUMED = "agent.resumed"
    WORKSPACE_PAUSED = "workspace.paused"
    WORKSPACE_RESUMED = "workspace.resumed"
    # An agent's own limits, or the workspace's defaults for its agents, changed by an owner or admin.
    AGENT_LIMITS_UPDATED = "agent.limits.updated"
    WORKSPACE_LIMITS_UPDATED = "workspace.limits.updated"
    API_KEY_CREATED = "api_key.created"
    API_KEY_REVOKED = "api_key.revoked"
    API_KEY_ROTATED = "api_key.rotated"
    # A workspace's mail settings, changed by an owner or admin (or by ops with a management command).
    WORKSPACE_INBOUND_DOMAIN_UPDATED = "workspace.inbound_domain.updated"
    # A domain of the workspace's own asked for (pending until its DNS record is found), and each attempt
    # to verify it: the domain taken into use, or refused (no record, wrong token, taken meanwhile).
    WORKSPACE_INBOUND_DOMAIN_REQUESTED = "workspace.inbound_domain.requested"
    WORKSPACE_INBOUND_DOMAIN_VERIFIED = "workspace.inbound_domain.verified"
    WORKSPACE_INBOUND_DOMAIN_VERIFY_REJECTED = "workspace.inbound_domain.verify.rejected"
    WORKSPACE_INBOUND_SECRET_CREATED = "workspace.inbound_webhook_secret.created"
    WORKSPACE_INBOUND_SECRET_ROTATED = "workspace.inbound_webhook_secret.rotated"
    # The workspace's team, changed by an owner on the dashboard (a member leaving is a removal of their
    # own): invitations sent, sent again, withdrawn and accepted (the invitee acting, by the emailed
    # link); roles changed; members removed; and the refusals that would have left no owner.
    TEAM_INVITATION_CREATED = "team.invitation.created"
    TEAM_INVITATION_RESENT = "team.invitation.resent"
    TEAM_INVITATION_REVOKED = "team.invitation.revoked"
    TEAM_INVITATION_ACCEPTED = "team.invitation.accepted"
    TEAM_MEMBER_ROLE_CHANGED = "team.member.role_changed"
    TEAM_MEMBER_ROLE_CHANGE_REJECTED = "team.member.role_change.rejected"
    TEAM_MEMBER_REMOVED = "team.member.removed"
    TEAM_MEMBER_REMOVE_REJECTED = "team.member.remove.rejected"
