"""Approvals: every write goes through these functions.

The engine's hold operations are durable transactions of their own, so each operation here is a short
sequence of durable transactions, ordered so that a failure between two of them is safe and
repairable: a request pins the hold before inserting the approval; a decision claims the approval's
status by CAS before settling the hold, and `approvals_finish_interrupted` completes what a crash left.
Every state change is audited, and announced through the outbox, in the transaction that makes it.

Design: docs/architecture.md, "Approvals: one decision, two apps' writes".
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, DatabaseError, IntegrityError, connection, connections, transaction
from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Now
from django.dispatch import Signal

from accounts.models import Membership, Permission
from agentcal import broker
from agentcal.clock import isoformat_z
from agentcal.errors import (
    AgentCalError,
    ApprovalAlreadyDecided,
    ApprovalExists,
    ApprovalExpired,
    HoldAlreadyCommitted,
    InvalidRequest,
    NotAMember,
    NotFound,
    NotOwner,
    RoleNotAllowed,
)
from agentcal.ids import new_public_id
from agentcal.text import is_one_line
from approvals.events import approval_announce
from approvals.models import NOTE_MAX_CHARS, SUMMARY_MAX_CHARS, Approval, ApprovalStatus
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings import engine
from bookings.models import Reservation
from bookings.selectors import reservation_group
from webhooks.models import EventType
from workspaces.actor import Actor
from workspaces.models import Workspace

logger = logging.getLogger(__name__)

DEFAULT_EXPIRES_IN_SECONDS = 24 * 3600
MIN_EXPIRES_IN_SECONDS = 60
MAX_EXPIRES_IN_SECONDS = 30 * 86400
EVIDENCE_MAX_BYTES = 64 * 1024
STATE_MAX_BYTES = 16 * 1024
# The repair sweep looks at decisions older than this (younger ones are most likely still in flight)
# and younger than the window (it runs every 30 s; the window covers a beat outage of days).
INTERRUPTED_AFTER = timedelta(seconds=60)
REPAIR_WINDOW = timedelta(days=7)
EXPIRE_BATCH = 200
# First key of the advisory lock that serialises approval requests per hold ("APPR").
_HOLD_LOCK_NAMESPACE = 0x41505052

# Sent once when an approval leaves `pending` — approved, denied, cancelled or expired — with `approval=`,
# inside the transaction that moves it, so what a receiver writes commits (or rolls back) with the decision.
# For apps whose actions wait on an approval without approvals knowing them (a review-first email draft,
# inboxes.review); approvals must not import them. A receiver's exception undoes the decision.
approval_ended = Signal()


# --- Requesting ---------------------------------------------------------------------------------------------


def approval_request(
    *,
    actor: Actor,
    summary: str,
    evidence: dict[str, Any],
    expires_in_seconds: int | None = None,
    hold_id: str | None = None,
    state: Any = None,
) -> Approval:
    """Open an approval for the acting agent. With `hold_id` (the agent's own live hold) the hold is
    pinned live until the approval's expiry, so it keeps blocking the span while a person decides."""
    if actor.agent is None:
        raise InvalidRequest("Only an agent can request an approval.")
    expires_in = _checked_request(summary, evidence, state, expires_in_seconds)
    public_id = new_public_id("appr")
    fields: dict[str, Any] = {"summary": summary, "evidence": evidence, "state": state}
    if hold_id is None:
        return _approval_insert(
            actor=actor, public_id=public_id, hold_id=None, expires_at=_db_now_plus(expires_in), **fields
        )

    rows = reservation_group(workspace=actor.workspace, hold_id=hold_id)
    if not rows:
        raise NotFound(f"No hold {hold_id} in this workspace.")
    if rows[0].agent_id != actor.agent.pk:
        raise NotOwner("Only the agent that made the hold may ask for approval to commit it.")
    with _hold_lock(hold_id):
        # Under the lock this check is reliable, so a second request never moves the first one's pin;
        # the partial unique constraint stays the guarantee.
        pending = _pending_approval_for(hold_id)
        if pending is not None:
            raise ApprovalExists(
                f"Approval {pending} is already pending for hold {hold_id}.",
                approval_id=pending,
                hold_id=hold_id,
            )
        previous_expiry = (
            Reservation.objects.filter(hold_id=hold_id, is_primary=True)
            .values_list("expires_at", flat=True)
            .first()
        )
        expires_at = _db_now_plus(expires_in)
        # Raises hold_expired / hold_evicted / hold_released / hold_already_committed if not live.
        engine.hold_pin_expiry(
            actor=actor,
            hold_id=hold_id,
            until=expires_at,
            reason=f"approval {public_id}",
            approval_id=public_id,
        )
        try:
            return _approval_insert(
                actor=actor, public_id=public_id, hold_id=hold_id, expires_at=expires_at, **fields
            )
        except Exception:
            # No approval: the hold must not stay pinned (it would block the span for up to 30 days).
            if previous_expiry is not None:
                _restore_hold_expiry(
                    actor=actor, hold_id=hold_id, until=previous_expiry, approval_id=public_id
                )
            raise


def _checked_request(summary: str, evidence: Any, state: Any, expires_in_seconds: int | None) -> int:
    """The request's shape; the API's serializer checks the same, this guards every other caller."""
    errors: dict[str, list[str]] = {}
    if not is_one_line(summary) or not summary.strip():
        errors["summary"] = ["Must be one non-empty line (no line breaks)."]
    elif len(summary) > SUMMARY_MAX_CHARS:
        errors["summary"] = [f"At most {SUMMARY_MAX_CHARS} characters."]
    if not isinstance(evidence, dict):
        errors["evidence"] = ["Must be a JSON object."]
    elif _json_bytes(evidence) > EVIDENCE_MAX_BYTES:
        errors["evidence"] = [f"Must serialize to at most {EVIDENCE_MAX_BYTES} bytes."]
    if state is not None and _json_bytes(state) > STATE_MAX_BYTES:
        errors["state"] = [f"Must serialize to at most {STATE_MAX_BYTES} bytes."]
    expires_in = DEFAULT_EXPIRES_IN_SECONDS if expires_in_seconds is None else expires_in_seconds
    if not MIN_EXPIRES_IN_SECONDS <= expires_in <= MAX_EXPIRES_IN_SECONDS:
        errors["expires_in_seconds"] = [
            f"Must be between {MIN_EXPIRES_IN_SECONDS} and {MAX_EXPIRES_IN_SECONDS}."
        ]
    if errors:
        raise InvalidRequest("Some fields are missing or invalid; see `errors`.", errors=errors)
    return expires_in


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value).encode())


@contextmanager
def _hold_lock(hold_id: str) -> Iterator[None]:
    """An advisory lock on one hold, held across the pin and the insert (two transactions of this
    connection's). It is transaction-scoped, taken in a transaction of a second connection that stays open
    meanwhile: a session-level lock would outlive its holder behind a transaction-mode pooler (PgBouncer
    lends a server connection for one transaction, so the lock would stay on whichever server connection
    took it, and the unlock would run on another). The transaction's end releases it, also when this
    process dies."""
    locker = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        locker.set_autocommit(False)
        with locker.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_HOLD_LOCK_NAMESPACE, hold_id])
        yield
    finally:
        try:
            locker.rollback()
        except DatabaseError:
            # The connection is gone, and its transaction's lock with it.
            logger.warning(
                "could not end the approval lock's transaction for hold %s", hold_id, exc_info=True
            )
        finally:
            locker.close()


def _pending_approval_for(hold_id: str) -> str | None:
    return (
        Approval.objects.filter(hold_id=hold_id, status=ApprovalStatus.PENDING)
        .values_list("public_id", flat=True)
        .first()
    )


def _db_now_plus(seconds: int) -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() + make_interval(secs => %s)", [seconds])
        return cursor.fetchone()[0]


def _restore_hold_expiry(*, actor: Actor, hold_id: str, until: datetime, approval_id: str) -> None:
    with contextlib.suppress(AgentCalError):  # the hold is no longer live: nothing is pinned any more
        engine.hold_pin_expiry(
            actor=actor, hold_id=hold_id, until=until, reason=f"approval {approval_id} not created"
        )


def _approval_insert(
    *,
    actor: Actor,
    public_id: str,
    summary: str,
    evidence: dict[str, Any],
    state: Any,
    hold_id: str | None,
    expires_at: datetime,
) -> Approval:
    assert actor.agent is not None
    try:
        with transaction.atomic(durable=True):
            approval = Approval.objects.create(
                public_id=public_id,
                workspace=actor.workspace,
                agent=actor.agent,
                summary=summary,
                evidence=evidence,
                # Serialized as Django serializes `evidence` for jsonb, so the two are equal by construction
                # (a check constraint holds them to it); this one keeps the agent's key order.
                evidence_json=json.dumps(evidence),
                state=state,
                hold_id=hold_id,
                expires_at=expires_at,
            )
            audit_record(
                event_type=AuditEvent.APPROVAL_REQUESTED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                reservation_public_id=hold_id or "",
                details={
                    "approval_id": public_id,
                    "summary": summary,
                    "hold_id": hold_id,
                    "expires_at": isoformat_z(approval.expires_at),
                },
            )
            approval_announce(EventType.APPROVAL_REQUESTED, approval)
            # Emailed by a worker: the owners' notification must not hold a request hostage to a slow
            # SMTP server. If the broker refuses the message, the publisher's thread sends it instead.
            broker.enqueue_on_commit("approvals.notify_owners", (approval.pk,), fallback=broker.RUN_HERE)
    except IntegrityError as exc:
        # Unreachable while requests for a hold take _hold_lock; if it ever happens, the constraint did
        # its job and the caller gets the ordinary answer.
        if hold_id is not None and "approval_one_pending_per_hold" in str(exc):
            raise ApprovalExists(
                f"An approval is already pending for hold {hold_id}.",
                approval_id=_pending_approval_for(hold_id) or "",
                hold_id=hold_id,
            ) from exc
        raise
    return approval


# --- Deciding (a signed-in person, from the dashboard) ------------------------------------------------------


def approval_decide(
    *, approval_id: str, workspace: Workspace, user: User, approve: bool, note: str = ""
) -> Approval:
    """A signed-in member of the workspace approves or denies a pending approval. There is no API for
    this: agents cannot decide.

    Three steps, each its own transaction: (1) claim the decision by CAS on "pending and not expired"
    (database clock), audited; (2) commit (approve) or release (deny) the gated hold, through the
    engine; (3) on approve, record `booking_id` (or `booking_error`, e.g. "hold_evicted", when the hold
    could not be committed) and only then emit `approval.approved`, so the webhook carries the
    booking. A denial is announced in step 1. Refusals raise `ApprovalAlreadyDecided` (who and when)
    or `ApprovalExpired`, and are audited.
    """
    email = user.email or user.get_username()
    try:
        return _decide(approval_id=approval_id, workspace=workspace, user=user, approve=approve, note=note)
    except AgentCalError as exc:
        if not exc.audited:
            with transaction.atomic():
                audit_record(
                    event_type=AuditEvent.APPROVAL_DECIDE_REJECTED,
                    outcome=Outcome.REJECTED,
                    actor=Actor(workspace=workspace, agent=None, user_email=email),
                    http_status=exc.status,
                    failure_reason=exc.code,
                    details={"approval_id": approval_id, "approve": approve},
                )
            exc.audited = True
        raise


def _decide(*, approval_id: str, workspace: Workspace, user: User, approve: bool, note: str) -> Approval:
    if len(note) > NOTE_MAX_CHARS:
        raise InvalidRequest(f"The note may be at most {NOTE_MAX_CHARS} characters.")
    approval = (
        Approval.objects.filter(workspace=workspace, public_id=approval_id)
        .select_related("agent", "workspace")
        .first()
    )
    if approval is None:
        raise NotFound(f"No approval {approval_id} in this workspace.")
    membership = Membership.objects.filter(workspace=workspace, user=user).first()
    if not user.is_active or membership is None:
        raise NotAMember(f"{user.get_username()} is not a member of workspace {workspace.slug}.")
    if not membership.may(Permission.DECIDE_APPROVALS):
        raise RoleNotAllowed(f"A {membership.role} of workspace {workspace.slug} does not decide approvals.")
    email = user.email or user.get_username()
    # The requesting agent, with the deciding person recorded on it (audit rows name both).
    actor = Actor(workspace=workspace, agent=approval.agent, user_email=email)
    status = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
    with transaction.atomic(durable=True):
        claimed = Approval.objects.filter(
            pk=approval.pk, status=ApprovalStatus.PENDING, expires_at__gt=Now()
        ).update(
            status=status,
            decided_at=Now(),
            decided_by=user,
            decided_by_email=email,
            note=note,
            version=F("version") + 1,
        )
        if claimed != 1:
            raise _not_pending(approval.pk)  # someone decided first, the agent cancelled, or it expired
        _reload(approval)
        audit_record(
            event_type=AuditEvent.APPROVAL_APPROVED if approve else AuditEvent.APPROVAL_DENIED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            reservation_public_id=approval.hold_id or "",
            details={"approval_id": approval.public_id, "hold_id": approval.hold_id, "note": note},
        )
        if not (approve and approval.hold_id):
            approval_announce(EventType.APPROVAL_APPROVED if approve else EventType.APPROVAL_DENIED, approval)
        approval_ended.send(sender=Approval, approval=approval)
    if approval.hold_id is None:
        return approval
    if approve:
        return _settle_approved(approval, actor=actor)
    engine.hold_release_unless_settled(actor=actor, hold_id=approval.hold_id)
    return approval


def _reload(approval: Approval) -> None:
    """Re-read what the status updates change (keeping the cached agent and workspace)."""
    approval.refresh_from_db(fields=_DECISION_FIELDS)


_DECISION_FIELDS = [
    "status",
    "decided_at",
    "decided_by",
    "decided_by_email",
    "note",
    "booking_id",
    "booking_error",
    "version",
]


def _not_pending(approval_pk: int) -> AgentCalError:
    """Why a pending-only CAS on this approval moved nothing."""
    current = Approval.objects.get(pk=approval_pk)
    if current.status in (ApprovalStatus.PENDING, ApprovalStatus.EXPIRED):
        # Still `pending` here means its time is up and the sweep has not run yet.
        return ApprovalExpired(
            f"Approval {current.public_id} expired at {isoformat_z(current.expires_at)}.",
            approval_id=current.public_id,
            expires_at=current.expires_at,
        )
    by = f" by {current.decided_by_email}" if current.decided_by_email else ""
    return ApprovalAlreadyDecided(
        f"Approval {current.public_id} was already {current.status}{by}.",
        approval_id=current.public_id,
        approval_status=current.status,
        decided_by=current.decided_by_email or None,
        decided_at=current.decided_at,
    )


def _settle_approved(approval: Approval, *, actor: Actor) -> Approval:
    """Commit the hold a person approved and record the outcome on the approval; announce it once."""
    assert approval.hold_id is not None
    booking_id: str | None = None
    booking_error = ""
    try:
        group = engine.hold_commit_approved(actor=actor, hold_id=approval.hold_id)
        booking_id = group.primary.booking_id
    except HoldAlreadyCommitted as exc:
        # Committed already: by an earlier, interrupted settlement of this approval, or by the agent.
        booking_id = exc.extra.get("booking_id")
        booking_error = "" if booking_id else exc.code
    except AgentCalError as exc:
        # The person said yes, but the hold is gone (expired, evicted by a higher priority, released).
        # The decision stands; the agent learns why there is no booking.
        booking_error = exc.code
    with transaction.atomic(durable=True):
        recorded = Approval.objects.filter(
            pk=approval.pk, status=ApprovalStatus.APPROVED, booking_id__isnull=True, booking_error=""
        ).update(booking_id=booking_id, booking_error=booking_error, version=F("version") + 1)
        _reload(approval)
        if recorded:
            audit_record(
                event_type=AuditEvent.APPROVAL_SETTLED,
                outcome=Outcome.SUCCESS,
                actor=actor,
                reservation_public_id=booking_id or approval.hold_id,
                details={
                    "approval_id": approval.public_id,
                    "hold_id": approval.hold_id,
                    "booking_id": booking_id,
                    "booking_error": booking_error,
                },
            )
            approval_announce(EventType.APPROVAL_APPROVED, approval)
    return approval


# --- Cancelling (the requesting agent) ----------------------------------------------------------------------


def approval_for_agent(*, actor: Actor, approval_id: str) -> Approval:
    """The acting agent's own approval, or 404 (another agent's or workspace's is not revealed)."""
    approval = (
        Approval.objects.filter(workspace=actor.workspace, agent=actor.agent, public_id=approval_id)
        .select_related("agent", "workspace")
        .first()
    )
    if approval is None:
        raise NotFound(f"No approval {approval_id} for this agent.")
    return approval


def approval_cancel(*, actor: Actor, approval_id: str) -> Approval:
    """The requesting agent withdraws its pending approval; a gated hold is released."""
    approval = approval_for_agent(actor=actor, approval_id=approval_id)
    if approval.status == ApprovalStatus.CANCELLED:
        return approval  # cancelling twice is harmless: same answer, nothing written
    with transaction.atomic(durable=True):
        claimed = Approval.objects.filter(
            pk=approval.pk, status=ApprovalStatus.PENDING, expires_at__gt=Now()
        ).update(status=ApprovalStatus.CANCELLED, decided_at=Now(), version=F("version") + 1)
        if claimed != 1:
            raise _not_pending(approval.pk)
        _reload(approval)
        audit_record(
            event_type=AuditEvent.APPROVAL_CANCELLED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            reservation_public_id=approval.hold_id or "",
            details={"approval_id": approval.public_id, "hold_id": approval.hold_id},
        )
        approval_announce(EventType.APPROVAL_CANCELLED, approval)
        approval_ended.send(sender=Approval, approval=approval)
    if approval.hold_id:
        engine.hold_release_unless_settled(actor=actor, hold_id=approval.hold_id)
    return approval


# --- Sweeps (Celery beat) -----------------------------------------------------------------------------------


def approvals_expire_due(*, limit: int = EXPIRE_BATCH) -> int:
    """Pending approvals past their expiry become `expired` (never `denied`); their holds are released.

    Reads never wait for this (an unswept approval already reads as `expired`); it is for the
    `approval.expired` event and the hold. Safe on several workers at once: rows are claimed
    FOR UPDATE SKIP LOCKED and moved by a status-checked update, so each approval is expired,
    audited and announced exactly once.
    """
    with transaction.atomic(durable=True):
        due_ids = list(
            Approval.objects.select_for_update(skip_locked=True)
            .filter(status=ApprovalStatus.PENDING, expires_at__lte=Now())
            .order_by("expires_at")
            .values_list("pk", flat=True)[:limit]
        )
        if not due_ids:
            return 0
        Approval.objects.filter(pk__in=due_ids, status=ApprovalStatus.PENDING).update(
            # The moment it expired, so the row says what reads said before the sweep.
            status=ApprovalStatus.EXPIRED,
            decided_at=F("expires_at"),
            version=F("version") + 1,
        )
        expired = list(
            Approval.objects.filter(pk__in=due_ids, status=ApprovalStatus.EXPIRED).select_related(
                "agent", "workspace"
            )
        )
        for approval in expired:
            audit_record(
                event_type=AuditEvent.APPROVAL_EXPIRED,
                outcome=Outcome.SUCCESS,
                actor=None,
                workspace_id=approval.workspace_id,
                reservation_public_id=approval.hold_id or "",
                details={
                    "approval_id": approval.public_id,
                    "agent_id": approval.agent.public_id,
                    "hold_id": approval.hold_id,
                    "expires_at": isoformat_z(approval.expires_at),
                },
            )
            approval_announce(EventType.APPROVAL_EXPIRED, approval)
            approval_ended.send(sender=Approval, approval=approval)
    for approval in expired:
        if approval.hold_id:
            # Usually lapsed already (it was pinned to this same expiry); released if it was not.
            engine.hold_release_unless_settled(
                actor=Actor(workspace=approval.workspace, agent=approval.agent), hold_id=approval.hold_id
            )
    return len(expired)


def approvals_finish_interrupted(*, limit: int = EXPIRE_BATCH) -> int:
    """Complete decisions a crash cut short between their transactions (see the module docstring):
    an approved approval whose hold was never committed or whose outcome was never recorded, and a
    denied or cancelled approval whose hold is still held. Every step is a CAS, so racing a decision
    still in flight would be harmless; recent ones are left alone anyway, to keep the audit trail quiet.
    """
    recent = Approval.objects.filter(
        hold_id__isnull=False,
        decided_at__lt=Now() - INTERRUPTED_AFTER,
        decided_at__gt=Now() - REPAIR_WINDOW,
    )
    finished = 0
    unsettled = (
        recent.filter(status=ApprovalStatus.APPROVED, booking_id__isnull=True, booking_error="")
        .select_related("agent", "workspace")
        .order_by("decided_at")[:limit]
    )
    for approval in unsettled:
        actor = Actor(
            workspace=approval.workspace, agent=approval.agent, user_email=approval.decided_by_email
        )
        _settle_approved(approval, actor=actor)
        finished += 1
    # A pinned hold lives until its approval's expiry at most, so only those not yet expired matter;
    # and not a hold a newer approval has taken over since (it pinned the hold again).
    still_held = (
        recent.filter(status__in=(ApprovalStatus.DENIED, ApprovalStatus.CANCELLED), expires_at__gt=Now())
        .filter(Exists(Reservation.objects.live_holds().filter(hold_id=OuterRef("hold_id"))))
        .exclude(Exists(Approval.objects.filter(hold_id=OuterRef("hold_id"), pk__gt=OuterRef("pk"))))
        .select_related("agent", "workspace")[:limit]
    )
    for approval in still_held:
        assert approval.hold_id is not None
        actor = Actor(
            workspace=approval.workspace, agent=approval.agent, user_email=approval.decided_by_email
        )
        if engine.hold_release_unless_settled(actor=actor, hold_id=approval.hold_id) is not None:
            finished += 1
    return finished
