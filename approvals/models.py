"""Approval requests: an agent asks a signed-in human to sign off a consequential action.

With `hold_id` an approval gates a booking: the hold is pinned live until the approval's expiry, the
server commits it when a person approves, and releases it when the approval is denied, expires or is
cancelled. Behaviour lives in approvals/services.py; the database keeps the invariants below.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast, Now

from agentcal.ids import new_public_id
from workspaces.models import Agent, Workspace

SUMMARY_MAX_CHARS = 200
NOTE_MAX_CHARS = 2000


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"  # a person said yes
    DENIED = "denied"  # a person said no
    EXPIRED = "expired"  # nobody decided in time (never reported as `denied`)
    CANCELLED = "cancelled"  # the requesting agent withdrew it


# Statuses a person chose; the others that end an approval have no person behind them.
DECIDED_BY_A_PERSON = (ApprovalStatus.APPROVED, ApprovalStatus.DENIED)
ENDED_WITHOUT_A_PERSON = (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED)


class Approval(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "appr"), editable=False
    )
    # Both foreign keys are covered by the composite indexes below (approval_queue, approval_agent_recent).
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="approvals", db_index=False
    )
    # The requesting agent: the only one that sees, cancels and gets webhooks for this approval.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="approvals", db_index=False)
    summary = models.CharField(max_length=SUMMARY_MAX_CHARS)
    evidence = models.JSONField(default=dict)
    # The same evidence as the agent sent it, serialized in its own key order. `evidence` is jsonb, which
    # keeps an object's keys sorted (shortest first, then bytewise): the person deciding would read the
    # agent's account re-shuffled ("to" before "subject" before "message"...). jsonb stays for queries
    # (inboxes.review finds a draft's approval by `evidence__message`); this copy is what people read
    # (`evidence_in_order`). Empty for approvals made before it was kept: their order is lost.
    evidence_json = models.TextField(blank=True, default="")
    # Opaque agent data, echoed back in the approval and in its webhooks (so a stateless agent can
    # resume where it left off when the decision arrives).
    state = models.JSONField(null=True, blank=True)
    hold_id = models.CharField(max_length=32, null=True, blank=True)
    status = models.CharField(max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    # When the approval left `pending`, however it did; for `expired` it is `expires_at`.
    decided_at = models.DateTimeField(null=True, blank=True)
    # The deciding person; the email is kept (and shown) even after the user is deleted.
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_by_email = models.CharField(max_length=254, blank=True)
    note = models.CharField(max_length=NOTE_MAX_CHARS, blank=True)
    # After an approval that gated a hold: the booking it became, or why it could not be committed
    # (e.g. "hold_evicted": the person said yes but a higher-priority agent took the slot meanwhile).
    booking_id = models.CharField(max_length=32, null=True, blank=True)
    booking_error = models.CharField(max_length=64, blank=True)
    version = models.IntegerField(default=1)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ApprovalStatus.values), name="approval_status_valid"
            ),
            # Who/when match the status: pending has neither; a person's decision has both; an
            # expiry or a cancellation has a time and no person. The dashboard's "already decided by
            # X at T" relies on this.
            models.CheckConstraint(
                condition=(
                    Q(status=ApprovalStatus.PENDING, decided_at__isnull=True, decided_by_email="")
                    | Q(status__in=DECIDED_BY_A_PERSON, decided_at__isnull=False) & ~Q(decided_by_email="")
                    | Q(status__in=ENDED_WITHOUT_A_PERSON, decided_at__isnull=False, decided_by_email="")
                ),
                name="approval_decision_matches_status",
            ),
            # A booking (or the reason there is none) only for an approved approval that gated a hold,
            # and never both.
            models.CheckConstraint(
                condition=(
                    Q(booking_id__isnull=True, booking_error="")
                    | Q(status=ApprovalStatus.APPROVED, hold_id__isnull=False)
                    & (Q(booking_id__isnull=True) | Q(booking_error=""))
                ),
                name="approval_booking_only_when_approved",
            ),
            # One line: the summary is shown in the queue, in email subjects and in notifications.
            models.CheckConstraint(
                condition=~Q(summary="") & ~Q(summary__contains="\n") & ~Q(summary__contains="\r"),
                name="approval_summary_one_line",
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=F("created_at")), name="approval_expires_after_creation"
            ),
            # The ordered copy says exactly what `evidence` says: one cannot be written without the other.
            models.CheckConstraint(
                condition=Q(evidence_json="") | Q(evidence=Cast("evidence_json", models.JSONField())),
                name="approval_evidence_json_matches",
            ),
            # At most one pending approval gates a hold (a second request is 409 approval_exists):
            # two approvals could otherwise commit and release the same hold.
            models.UniqueConstraint(
                fields=["hold_id"],
                condition=Q(status=ApprovalStatus.PENDING),
                name="approval_one_pending_per_hold",
            ),
        ]
        indexes = [
            # The dashboard queue: a workspace's approvals by status, newest first.
            models.Index(fields=["workspace", "status", "-created_at"], name="approval_queue"),
            # The agent's own listing (GET /v1/approvals), newest first by id.
            models.Index(fields=["agent", "-id"], name="approval_agent_recent"),
            # The repair sweep (approvals_finish_interrupted): recent decisions on gated holds.
            models.Index(
                fields=["decided_at"], condition=Q(hold_id__isnull=False), name="approval_gated_decided"
            ),
            # The repair sweep's approved decisions whose hold was never committed: a handful, where
            # approval_gated_decided would read every decision of the window.
            models.Index(
                fields=["decided_at"],
                condition=Q(
                    hold_id__isnull=False,
                    status=ApprovalStatus.APPROVED,
                    booking_id__isnull=True,
                    booking_error="",
                ),
                name="approval_approved_unsettled",
            ),
            # The repair sweep's "has a newer approval pinned this hold since?", per decision it finds.
            models.Index(fields=["hold_id"], condition=Q(hold_id__isnull=False), name="approval_hold"),
            # The review repair (inboxes.review.reviews_repair) finds a draft's approval by the agent and
            # the draft named in its evidence (written exactly as that look-up's `evidence__message`), in
            # its order: by the agent alone, a planner without statistics read the agent's every approval.
            models.Index(
                F("agent"),
                KeyTransform("message", "evidence"),
                F("id"),
                condition=Q(hold_id__isnull=True),
                name="approval_agent_message",
            ),
            # The expiry sweep: pending approvals whose time is up.
            models.Index(
                fields=["expires_at"], condition=Q(status=ApprovalStatus.PENDING), name="approval_pending_due"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.status}"

    @property
    def evidence_in_order(self) -> Any:
        """The evidence with every object's keys in the order the agent sent them."""
        if self.evidence_json:
            return json.loads(self.evidence_json)
        return self.evidence

    def status_at(self, now: datetime) -> str:
        """The status as of `now` (the database's clock): a pending approval past its expiry is
        `expired` whether or not the sweep has run yet."""
        if self.status == ApprovalStatus.PENDING and self.expires_at <= now:
            return ApprovalStatus.EXPIRED
        return self.status

    def decided_at_as_of(self, now: datetime) -> datetime | None:
        if self.status_at(now) == ApprovalStatus.EXPIRED:
            return self.expires_at
        return self.decided_at
