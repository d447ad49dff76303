from __future__ import annotations

from django.db import models


class AuditEvent(models.TextChoices):
    """Every audited action. Rejections of an action are `<action>.rejected`."""

    AUTH_REJECTED = "auth.rejected"
    REQUEST_REJECTED = "request.rejected"
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
    API_KEY_CREATED = "api_key.created"
    API_KEY_REVOKED = "api_key.revoked"
    API_KEY_ROTATED = "api_key.rotated"
