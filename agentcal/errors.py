"""Every domain error, in one hierarchy. Each carries its HTTP status and machine code; the agent API
renders them as problem+json (agentcal.api.problems, the one place that maps errors to responses),
and the dashboard and management commands show their `detail`.

Extra keyword arguments become top-level members of the problem document (e.g. `alternatives`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from agentcal.clock import isoformat_z

_PROBLEM_MEMBERS = frozenset({"type", "title", "status", "detail", "error"})


class AgentCalError(Exception):
    status: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"
    title: ClassVar[str] = "Bad request"

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        reserved = _PROBLEM_MEMBERS.intersection(extra)
        assert not reserved, f"extra members would overwrite RFC 9457 members: {sorted(reserved)}"
        self.detail = detail or self.title
        self.extra = extra
        # Set once an audit row has been written for this rejection, so it is not written twice.
        self.audited = False
        # Set when one of the agent's own limits refused the request (its name: "requests", "live_holds",
        # "paused"...): such refusals are audited once per window per agent and limit, not one by one
        # (workspaces/limits.py). `first_marks`, when the check already knows: (first refusal of its
        # window, first of the UTC day).
        self.agent_limit = ""
        self.first_marks: tuple[bool, bool] | None = None
        super().__init__(self.detail)

    def problem(self) -> dict[str, Any]:
        return {
            "type": f"urn:agentcal:problem:{self.code}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "error": self.code,
            **self.extra,
        }


class InvalidRequest(AgentCalError):
    status, code, title = 400, "invalid_request", "The request is not valid"


class InvalidRange(AgentCalError):
    status, code, title = 400, "invalid_range", "The time range is not valid"


class Unauthenticated(AgentCalError):
    status, code, title = 401, "unauthenticated", "A valid API key is required"
    # For the audit row, never the response: the presented key's non-secret prefix and its workspace.
    key_prefix = ""
    workspace_id: int | None = None


class InsufficientScope(AgentCalError):
    status, code, title = 403, "insufficient_scope", "The API key lacks the scope this endpoint needs"


class PriorityNotAllowed(AgentCalError):
    status, code, title = 403, "priority_not_allowed", "The requested priority is above the agent's maximum"


class NotOwner(AgentCalError):
    status, code, title = 403, "not_owner", "Only the agent that made this reservation may change it"


class HoldTokenMismatch(AgentCalError):
    status, code, title = 403, "hold_token_mismatch", "The hold token does not match this hold"


class NotFound(AgentCalError):
    status, code, title = 404, "not_found", "No such resource"


class SlotConflict(AgentCalError):
    status, code, title = (
        409,
        "slot_conflict",
        "The requested time overlaps a reservation you cannot take over",
    )


class HoldExpired(AgentCalError):
    status, code, title = 409, "hold_expired", "The hold has expired"


class HoldEvicted(AgentCalError):
    status, code, title = 409, "hold_evicted", "The hold was evicted by a higher-priority request"


class HoldReleased(AgentCalError):
    status, code, title = 409, "hold_released", "The hold was released"


class HoldAlreadyCommitted(AgentCalError):
    status, code, title = 409, "hold_already_committed", "The hold is already committed"


class HoldAwaitingApproval(AgentCalError):
    status, code, title = (
        409,
        "hold_awaiting_approval",
        "A person has not yet decided the approval gating this hold",
    )


class StaleFencingToken(AgentCalError):
    status, code, title = 409, "stale_fencing_token", "A newer fencing token was issued for this range"


class BookingNotLive(AgentCalError):
    status, code, title = 409, "booking_not_live", "The booking is no longer live"


class IdempotencyInProgress(AgentCalError):
    status, code, title = (
        409,
        "idempotency_in_progress",
        "A request with this Idempotency-Key is still running",
    )


class IdempotencyReplayUnavailable(AgentCalError):
    status, code, title = (
        409,
        "idempotency_replay_unavailable",
        "The response stored for this Idempotency-Key can no longer be read",
    )


class PreconditionFailed(AgentCalError):
    status, code, title = 412, "precondition_failed", "The calendar changed since the version in If-Match"


class PayloadTooLarge(AgentCalError):
    status, code, title = 413, "payload_too_large", "The request body is too large"


class RateLimited(AgentCalError):
    """Too many requests of one kind from one caller, refused before the work they would cost.
    `limit_name` says which budget; `retry_after_seconds` (also the Retry-After header) is when it has
    room again."""

    status, code, title = 429, "rate_limited", "Too many requests; retry later"

    def __init__(self, detail: str | None = None, *, limit_name: str, retry_after_seconds: int) -> None:
        super().__init__(detail, limit_name=limit_name, retry_after=retry_after_seconds)
        self.retry_after_seconds = retry_after_seconds


class AgentPaused(AgentCalError):
    """The agent, or its whole workspace, is paused by an owner (the emergency stop): writes are refused
    until a person resumes it; reads still answer. Waiting does not help, so nothing says when to retry."""

    status, code, title = 423, "agent_paused", "This agent is paused by its workspace's owners"

    def __init__(self, detail: str | None = None, *, paused: str, paused_at: str) -> None:
        super().__init__(detail, paused=paused, paused_at=paused_at, retryable=False)


class ServiceUnavailable(AgentCalError):
    status, code, title = (
        503,
        "service_unavailable",
        "A server AgentCal depends on is unreachable; nothing was written",
    )
    retry_after_seconds: ClassVar[int] = 1


class UpstreamStale(ServiceUnavailable):
    """A calendar's upstream link could not be brought as fresh as the agent asked for
    (`max_upstream_staleness_seconds`): nothing was decided on older data. `calendars` lists each
    stale link's calendar and `last_synced_at`."""

    status, code, title = (
        503,
        "upstream_stale",
        "A calendar's upstream copy is older than the request accepts and could not be refreshed",
    )

    def __init__(
        self, detail: str, *, calendars: list[dict[str, str | None]], retry_after_seconds: int
    ) -> None:
        super().__init__(detail, calendars=calendars, retryable=True)
        self.retry_after_seconds = retry_after_seconds  # type: ignore[misc]


class QuotaExceeded(AgentCalError):
    """A write over one of the agent's budgets: sends (inboxes/quotas.py), live holds or bookings per day
    (bookings/engine/budgets.py). `retry_after_seconds` (also the Retry-After header) is when it would
    fit; None when waiting cannot help (a limit of 0, or more recipients in one message than the daily
    limit)."""

    status, code, title = 429, "quota_exceeded", "A budget of this agent is used up"

    def __init__(
        self,
        detail: str | None = None,
        *,
        quota: str,
        limit: int,
        window_seconds: int,
        retry_after_seconds: int | None,
        **extra: Any,
    ) -> None:
        super().__init__(
            detail,
            quota=quota,
            limit=limit,
            window_seconds=window_seconds,
            retry_after=retry_after_seconds,
            **extra,
        )
        self.quota = quota  # "burst", "daily_sends", "daily_recipients", "live_holds", "bookings_per_day"
        self.limit = limit
        self.window_seconds = window_seconds
        self.retry_after_seconds = retry_after_seconds


class BookingTooLong(AgentCalError):
    status, code, title = 422, "booking_too_long", "The requested span is longer than this calendar allows"


class OutsideWorkingHours(AgentCalError):
    status, code, title = 422, "outside_working_hours", "The span is outside the calendar's working hours"


class InsufficientNotice(AgentCalError):
    status, code, title = (
        422,
        "insufficient_notice",
        "The span starts sooner than the calendar's notice allows",
    )


class NoSlotFound(AgentCalError):
    status, code, title = 409, "no_slot_found", "No time in the window suits every required calendar"


class IdempotencyKeyReused(AgentCalError):
    status, code, title = (
        422,
        "idempotency_key_reused",
        "This Idempotency-Key was used with a different request",
    )


# --- Workspaces, agents and keys ------------------------------------------------------------------------


class InvalidKey(Unauthenticated):
    """The presented key is malformed, unknown, wrong, revoked or expired. The response never says which
    (`reason` is for the logs); `workspace_id` is the workspace owning the presented prefix, when it
    exists, so the refusal is audited where that workspace can see attempts on its own keys."""

    def __init__(self, reason: str, workspace_id: int | None = None) -> None:
        super().__init__("The API key is invalid, revoked or expired.")
        self.reason = reason
        self.workspace_id = workspace_id


class WrongKeysRateLimited(RateLimited):
    """Too many secrets refused from one address (for one key prefix, or for all): refused before argon2
    runs. Audited as the refusals that led to it are, with the prefix and its workspace."""

    key_prefix = ""
    workspace_id: int | None = None


class InvalidScopes(AgentCalError):
    status, code, title = 400, "invalid_scopes", "Unknown or missing scopes"


class PriorityOutOfBounds(AgentCalError):
    status, code, title = 400, "priority_out_of_bounds", "The priorities are outside the allowed range"


class AgentSlugTaken(AgentCalError):
    status, code, title = 409, "agent_slug_taken", "Another agent of this workspace has this name"


class KeyNotActive(AgentCalError):
    """The key was already revoked (or, for rotation, already rotated or expired)."""

    status, code, title = 409, "key_not_active", "The API key is no longer active"


# --- Webhooks -----------------------------------------------------------------------------------------


class UnsafeWebhookUrl(AgentCalError):
    """A webhook URL we refuse to deliver to; `reason` (the detail) is safe to show to the agent."""

    status, code, title = 400, "unsafe_webhook_url", "The webhook URL is not allowed"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TooManyEndpoints(AgentCalError):
    status, code, title = 409, "too_many_endpoints", "This agent has the maximum number of webhook endpoints"


class WebhookEndpointDisabled(AgentCalError):
    status, code, title = 409, "webhook_endpoint_disabled", "The webhook endpoint is disabled"


# --- Upstream calendars (sync) -------------------------------------------------------------------------


class UnsafeUpstreamUrl(AgentCalError):
    status, code, title = 400, "unsafe_upstream_url", "The upstream calendar URL is not allowed"


class UpstreamAuthFailed(AgentCalError):
    status, code, title = 422, "upstream_auth_failed", "The upstream calendar refused these credentials"


class UpstreamNotACalendar(AgentCalError):
    status, code, title = 422, "upstream_not_a_calendar", "The URL is not a calendar"


class UpstreamUnreachable(AgentCalError):
    status, code, title = 502, "upstream_unreachable", "The upstream calendar server could not be reached"


class ConnectionExists(AgentCalError):
    status, code, title = 409, "connection_exists", "This calendar is already linked to an upstream calendar"


# --- People (dashboard sign-in) ---------------------------------------------------------------------------


class SignInFailed(AgentCalError):
    """A sign-in attempt failed; the detail is safe to show."""

    status, code, title = 400, "sign_in_failed", "Sign-in failed"


# --- Teams (dashboard: invitations, roles, members) -----------------------------------------------------


class TeamChangeNotAllowed(AgentCalError):
    status, code, title = 403, "team_change_not_allowed", "Only the workspace's owners manage its team"


class LastOwner(AgentCalError):
    status, code, title = 409, "last_owner", "A workspace keeps at least one owner"


class AlreadyMember(AgentCalError):
    status, code, title = 409, "already_member", "This person is already a member of the workspace"


class InvitationPending(AgentCalError):
    status, code, title = 409, "invitation_pending", "This address already has a pending invitation"


class InvitationNotPending(AgentCalError):
    status, code, title = 409, "invitation_not_pending", "The invitation was already accepted or revoked"


class InvitationThrottled(AgentCalError):
    status, code, title = 429, "invitation_throttled", "Too many links sent to this address lately"


# --- Approvals ----------------------------------------------------------------------------------------


class NotAMember(AgentCalError):
    status, code, title = 403, "not_a_member", "You are not a member of this workspace"


class RoleNotAllowed(AgentCalError):
    status, code, title = 403, "role_not_allowed", "Your role in this workspace does not allow this"


class ApprovalExists(AgentCalError):
    status, code, title = 409, "approval_exists", "A pending approval already gates this hold"

    def __init__(self, detail: str | None = None, *, approval_id: str, hold_id: str, **extra: Any) -> None:
        super().__init__(detail, approval_id=approval_id, hold_id=hold_id, **extra)
        self.approval_id = approval_id  # the pending approval that already exists
        self.hold_id = hold_id


class ApprovalAlreadyDecided(AgentCalError):
    """The approval left `pending` before this decision (another person decided it, or the agent
    cancelled it). Carries who and when, so the dashboard can say "already approved by X"."""

    status, code, title = 409, "approval_already_decided", "The approval was already decided"

    def __init__(
        self,
        detail: str | None = None,
        *,
        approval_id: str,
        approval_status: str,
        decided_by: str | None,
        decided_at: datetime | None,
        **extra: Any,
    ) -> None:
        super().__init__(
            detail,
            approval_id=approval_id,
            approval_status=approval_status,
            decided_by=decided_by,
            decided_at=isoformat_z(decided_at) if decided_at else None,
            **extra,
        )
        self.approval_id = approval_id
        self.approval_status = approval_status  # `status` is the HTTP status (409)
        self.decided_by_email = decided_by
        self.decided_at = decided_at


class ApprovalExpired(AgentCalError):
    status, code, title = 409, "approval_expired", "The approval expired before it was decided"

    def __init__(
        self, detail: str | None = None, *, approval_id: str, expires_at: datetime, **extra: Any
    ) -> None:
        super().__init__(detail, approval_id=approval_id, expires_at=isoformat_z(expires_at), **extra)
        self.approval_id = approval_id
        self.expires_at = expires_at
