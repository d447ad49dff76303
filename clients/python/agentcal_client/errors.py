"""Every error the client raises, one class per problem an agent reacts to differently.

The server answers failures as RFC 9457 problem+json with a machine code in `error`;
`problems.error_from_response` turns that code into the class below that names it (unknown codes fall
back to the class for the HTTP status, so a new server code still lands in the right family). Each
class's docstring says what an agent should do about it: that text is the advice an agent developer
needs, and docs/agents.md reuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from agentcal_client.models import Approval, SearchedWindow, Slot

T = TypeVar("T")

__all__ = [
    "AgentCalError",
    "AgentPaused",
    "APIConnectionError",
    "APITimeoutError",
    "ApprovalAlreadyDecided",
    "ApprovalExists",
    "ApprovalExpired",
    "ApprovalWaitTimeout",
    "AuthenticationError",
    "BookingNotLive",
    "BookingTooLong",
    "Conflict",
    "HoldAlreadyCommitted",
    "HoldAwaitingApproval",
    "HoldEvicted",
    "HoldExpired",
    "HoldNotLive",
    "HoldReleased",
    "HoldTokenMismatch",
    "IdempotencyInProgress",
    "IdempotencyKeyReused",
    "InsufficientNotice",
    "InsufficientScope",
    "InvalidRange",
    "InvalidRequest",
    "NoSlotFound",
    "NotFound",
    "NotOwner",
    "OutsideWorkingHours",
    "PayloadTooLarge",
    "PermissionDenied",
    "PreconditionFailed",
    "PriorityNotAllowed",
    "QuotaExceeded",
    "RateLimited",
    "ServerError",
    "ServiceUnavailable",
    "SlotConflict",
    "StaleFencingToken",
    "UnprocessableEntity",
    "WebhookVerificationError",
    "is_retryable",
]


class AgentCalError(Exception):
    """Something went wrong talking to AgentCal. Catch a subclass to react to one problem; the base
    class is for logging. `status` is the HTTP status (None when no response arrived), `code` the
    problem's machine code, `detail` a sentence for people, `body` the whole problem document."""

    default_code: ClassVar[str] = "error"

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.code = code or self.default_code
        self.body: dict[str, Any] = dict(body or {})
        self.request_id = request_id
        # Seconds the server asked us to wait (the Retry-After header), when it said.
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Whether sending the same request again (same Idempotency-Key) may succeed by waiting alone.
        The client has already done so for these errors, up to its `max_retries` and `retry_deadline`."""
        return is_retryable(self)

    def __str__(self) -> str:
        where = f"{self.status} {self.code}" if self.status is not None else self.code
        return f"{where}: {self.detail}"

    def _member(self, name: str, kind: type[T]) -> T | None:
        """A member of the problem document, if present and of the type the API documents."""
        found = self.body.get(name)
        return found if isinstance(found, kind) else None


# --- 400 ---------------------------------------------------------------------------------------------------


class InvalidRequest(AgentCalError):
    """The request is malformed: a field is missing, of the wrong type or out of range. `errors` maps
    each field to what is wrong with it. Fix the arguments; sending the same request again cannot help."""

    default_code = "invalid_request"

    @property
    def errors(self) -> dict[str, Any]:
        found = self.body.get("errors")
        return found if isinstance(found, dict) else {}


class InvalidRange(InvalidRequest):
    """The time span is unusable: the end is not after the start, an offset is missing, or it lies in the
    past. Re-plan with a span in the future (times with an explicit offset)."""

    default_code = "invalid_range"


# --- 401 / 403 ---------------------------------------------------------------------------------------------


class AuthenticationError(AgentCalError):
    """The API key is missing, malformed, revoked or expired. Do not retry: a person has to give the
    agent a working key (AGENTCAL_API_KEY)."""

    default_code = "unauthenticated"


class PermissionDenied(AgentCalError):
    """The key is valid but may not do this. Do not retry; report it to a person."""

    default_code = "forbidden"


class InsufficientScope(PermissionDenied):
    """The key lacks the scope this endpoint needs (the detail names it). Do not retry; a person must
    issue a key with that scope."""

    default_code = "insufficient_scope"


class PriorityNotAllowed(PermissionDenied):
    """The priority asked for is above this agent's maximum. Ask again with a lower priority (or none:
    the agent's own priority is the default)."""

    default_code = "priority_not_allowed"


class NotOwner(PermissionDenied):
    """Another agent made this hold or booking: only its owner may extend, release, commit or cancel it,
    even with its hold token. Leave it alone."""

    default_code = "not_owner"


class HoldTokenMismatch(PermissionDenied):
    """The hold token does not belong to this hold. Use the `hold_token` returned when the hold was
    created (HoldSession keeps it for you)."""

    default_code = "hold_token_mismatch"


# --- 404 ---------------------------------------------------------------------------------------------------


class NotFound(AgentCalError):
    """No such object in this agent's workspace (or it belongs to another agent's inbox). Check the id;
    do not retry with the same one."""

    default_code = "not_found"


# --- 409 ---------------------------------------------------------------------------------------------------


class Conflict(AgentCalError):
    """The request conflicts with the current state. Re-read the state and re-plan; sending the same
    request again gets the same answer."""

    default_code = "conflict"


class SlotConflict(Conflict):
    """The span overlaps a reservation this request may not take over (equal or higher priority, a frozen
    booking, or the calendar owner's own busy time). Do NOT retry the same span: pick one of
    `alternatives` (free spans of the same length, nearest first) or re-read availability. `conflicting`
    describes the blocker; when it is a hold, `conflicting["expires_at"]` says when it lapses unless
    committed."""

    default_code = "slot_conflict"

    @property
    def alternatives(self) -> tuple[Slot, ...]:
        from agentcal_client.models import Slot

        found = self.body.get("alternatives")
        if not isinstance(found, list):
            return ()
        return tuple(Slot.from_json(item) for item in found if isinstance(item, dict))

    @property
    def conflicting(self) -> dict[str, Any]:
        found = self.body.get("conflicting")
        return found if isinstance(found, dict) else {}

    @property
    def conflicting_bucket(self) -> str | None:
        return self._member("conflicting_bucket", str)

    @property
    def held_by_priority(self) -> int | None:
        """The blocker's priority; None for upstream busy time, which no priority takes over."""
        return self._member("held_by_priority", int)

    @property
    def caller_priority(self) -> int | None:
        return self._member("caller_priority", int)

    @property
    def reason(self) -> str | None:
        """Why the span is refused when it is not an overlap: "buffer" when it comes within a calendar's
        buffer of something live there (`conflicting["buffer_minutes"]`); no priority takes a buffer."""
        found = self.conflicting.get("reason")
        return found if isinstance(found, str) else None


class NoSlotFound(Conflict):
    """hold_meeting found no time in the window that suits every required calendar, so nothing was held.
    `reasons` says why (e.g. {"no_common_working_hours": True}, {"no_common_free_time": True},
    {"insufficient_notice": True}); `searched` is the window looked in. Widen the window, shorten the
    meeting or make some calendars optional, then search again; the same call gets the same answer."""

    default_code = "no_slot_found"

    @property
    def reasons(self) -> dict[str, bool]:
        found = self.body.get("reasons")
        return found if isinstance(found, dict) else {}

    @property
    def searched(self) -> SearchedWindow | None:
        from agentcal_client.models import SearchedWindow

        found = self.body.get("searched")
        return SearchedWindow.from_json(found) if isinstance(found, dict) else None


class HoldNotLive(Conflict):
    """The hold can no longer be extended, committed or released (see the subclass for why)."""

    default_code = "hold_not_live"


class HoldExpired(HoldNotLive):
    """The hold lapsed: its TTL ran out without a heartbeat. The slot may be taken by now: re-read
    availability and hold again (HoldSession heartbeats for you; a long pause, e.g. slow inference,
    without one is the usual cause)."""

    default_code = "hold_expired"


class HoldEvicted(HoldNotLive):
    """A higher-priority request (or the calendar owner's own event) took the slot from this hold.
    Do not fight for it: pick another slot (availability, or find_free_slot) and hold that."""

    default_code = "hold_evicted"


class HoldReleased(HoldNotLive):
    """The hold was already released (by this agent, or because the approval gating it was denied,
    cancelled or expired). Hold again if the meeting is still wanted."""

    default_code = "hold_released"


class HoldAlreadyCommitted(HoldNotLive):
    """The hold is already a booking (`body["booking_id"]`): nothing to do; read that booking."""

    default_code = "hold_already_committed"


class HoldAwaitingApproval(HoldNotLive):
    """An approval gates this hold: a person decides it, and the server commits or releases the hold
    with that decision. Wait for the approval (approvals.wait) instead of acting on the hold."""

    default_code = "hold_awaiting_approval"


class StaleFencingToken(Conflict):
    """A newer fencing token was issued for an overlapping span after this hold's: this agent's view is
    out of date. Do not commit it; re-read the hold and availability and re-plan."""

    default_code = "stale_fencing_token"


class BookingNotLive(Conflict):
    """The booking was already cancelled or bumped. Re-read it; to keep the meeting, book a new slot.
    A move names why: `booking_status` ("cancelled", "bumped"…) and, for a booking bumped too long ago to
    move back, `bumped_at`."""

    default_code = "booking_not_live"

    @property
    def booking_status(self) -> str | None:
        return self._member("booking_status", str)

    @property
    def bumped_at(self) -> datetime | None:
        return _local_time(self._member("bumped_at", str))


class IdempotencyInProgress(Conflict):
    """An earlier attempt with this Idempotency-Key is still running. The client waits and retries this
    one itself; seeing it means the earlier attempt outlived the retries: read the state before acting."""

    default_code = "idempotency_in_progress"


class ApprovalExists(Conflict):
    """A pending approval already gates this hold (`approval_id`): wait for that one instead of asking
    again."""

    default_code = "approval_exists"

    @property
    def approval_id(self) -> str | None:
        return self._member("approval_id", str)

    @property
    def hold_id(self) -> str | None:
        return self._member("hold_id", str)


class ApprovalAlreadyDecided(Conflict):
    """The approval was decided (or cancelled) before this request. Read it and act on its decision."""

    default_code = "approval_already_decided"

    @property
    def approval_id(self) -> str | None:
        return self._member("approval_id", str)

    @property
    def approval_status(self) -> str | None:
        return self._member("approval_status", str)


class ApprovalExpired(Conflict):
    """No one decided the approval before it expired; treat it as a no. Ask again only if still needed."""

    default_code = "approval_expired"

    @property
    def approval_id(self) -> str | None:
        return self._member("approval_id", str)


# --- 412 / 413 / 422 -----------------------------------------------------------------------------------


class PreconditionFailed(AgentCalError):
    """The calendar changed since the version sent as `if_version`. Re-read availability (its `version`)
    and decide again with what is there now."""

    default_code = "precondition_failed"


class PayloadTooLarge(AgentCalError):
    """The request body is over the server's limit. Send less (shorter evidence, fewer attendees)."""

    default_code = "payload_too_large"


class UnprocessableEntity(AgentCalError):
    """The request is well-formed but cannot be done as asked. Change it; retrying cannot help."""

    default_code = "unprocessable_entity"


class BookingTooLong(UnprocessableEntity):
    """The span is longer than this calendar allows (`max_allowed_minutes`). Split the meeting or ask
    for a shorter span; nothing was written."""

    default_code = "booking_too_long"

    @property
    def max_allowed_minutes(self) -> int | None:
        return self._member("max_allowed_minutes", int)

    @property
    def requested_minutes(self) -> int | None:
        return self._member("requested_minutes", int)

    @property
    def max_buckets_allowed(self) -> int | None:
        return self._member("max_buckets_allowed", int)


class OutsideWorkingHours(UnprocessableEntity):
    """The span is not inside the working hours of `calendar` (in its own `timezone`); nothing was written.
    `local_start_time`/`local_end_time` are the span in that zone and `hours_that_day` that calendar's hours
    on those dates. Pick a time inside everyone's hours: find_meeting_time or hold_meeting do that for you."""

    default_code = "outside_working_hours"

    @property
    def calendar(self) -> str | None:
        return self._member("calendar", str)

    @property
    def timezone(self) -> str | None:
        return self._member("timezone", str)

    @property
    def local_start_time(self) -> datetime | None:
        return _local_time(self._member("local_start_time", str))

    @property
    def local_end_time(self) -> datetime | None:
        return _local_time(self._member("local_end_time", str))

    @property
    def hours_that_day(self) -> dict[str, Any]:
        """Local date ("2026-12-24") → that day's [[start, end], …] hours; [] when closed."""
        found = self.body.get("hours_that_day")
        return found if isinstance(found, dict) else {}


class InsufficientNotice(UnprocessableEntity):
    """The span starts sooner than `calendar` allows (`min_notice_minutes`); nothing was written. Start at
    `earliest_start_time` or later (the server's clock, `server_time`, decided it, not this machine's)."""

    default_code = "insufficient_notice"

    @property
    def calendar(self) -> str | None:
        return self._member("calendar", str)

    @property
    def min_notice_minutes(self) -> int | None:
        return self._member("min_notice_minutes", int)

    @property
    def earliest_start_time(self) -> datetime | None:
        return _local_time(self._member("earliest_start_time", str))

    @property
    def server_time(self) -> datetime | None:
        return _local_time(self._member("server_time", str))


def _local_time(value: str | None) -> datetime | None:
    """A time of a problem document, kept in the offset the server wrote it in."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


class IdempotencyKeyReused(UnprocessableEntity):
    """This Idempotency-Key was already used with a different request. A programming error: use a new
    key for each distinct call (the client does unless you pass `idempotency_key=`)."""

    default_code = "idempotency_key_reused"


# --- 423 / 429: a person's stop, the rate limits and budgets ---------------------------------------------


class AgentPaused(AgentCalError):
    """A person paused this agent (`paused`: "agent"), or its whole workspace ("workspace"), at
    `paused_at`: an emergency stop. Nothing was written. Stop acting and tell the agent's owner; only a
    person can resume it, so the client never retries this. Reads still work meanwhile."""

    default_code = "agent_paused"

    @property
    def paused(self) -> str | None:
        return self._member("paused", str)

    @property
    def paused_at(self) -> datetime | None:
        return _local_time(self._member("paused_at", str))


class RateLimited(AgentCalError):
    """Too many requests (`limit_name`: "requests" per second, "searches" per minute, or "in_flight": too
    many at once). The client already waited `retry_after` seconds and retried up to its limit; seeing
    this means the load persists: slow down (`client.rate_limit` is the budget last reported)."""

    default_code = "rate_limited"

    @property
    def limit_name(self) -> str | None:
        return self._member("limit_name", str)


class QuotaExceeded(RateLimited):
    """A budget of this agent is used up (`quota`): live_holds (as many holds at once as it may have:
    commit or release one first), bookings_per_day, or its inbox's burst, daily_sends or
    daily_recipients. `limit` is the budget, `window_seconds` the period it counts. Not retried
    automatically: the same call could succeed after `retry_after` seconds (None: waiting cannot help, the
    limit is 0 or the message has more recipients than a day allows). Decide whether to wait, do less,
    or tell a person."""

    default_code = "quota_exceeded"

    @property
    def quota(self) -> str | None:
        return self._member("quota", str)

    @property
    def limit(self) -> int | None:
        return self._member("limit", int)

    @property
    def window_seconds(self) -> int | None:
        return self._member("window_seconds", int)


# --- 5xx and no answer -----------------------------------------------------------------------------------


class ServerError(AgentCalError):
    """The server failed. 502 and 504 were retried (same Idempotency-Key, so nothing is done twice);
    a 500 is not retried: report it."""

    default_code = "server_error"


class ServiceUnavailable(ServerError):
    """A server AgentCal depends on was unreachable and nothing was written. The client retried with the
    same Idempotency-Key up to its limit; try the same call again later (it is safe)."""

    default_code = "service_unavailable"


class APIConnectionError(AgentCalError):
    """No response arrived (connection refused or reset, DNS failure). Retried up to the limit. A write
    may or may not have happened: repeat the call with the same `idempotency_key=` to find out safely."""

    default_code = "connection_error"


class APITimeoutError(APIConnectionError):
    """No response arrived within the timeout. As for APIConnectionError: repeat with the same
    `idempotency_key=`, or read the state, before doing anything else."""

    default_code = "timeout"


# --- Client-side -------------------------------------------------------------------------------------------


class ApprovalWaitTimeout(AgentCalError):
    """approvals.wait gave up while the approval was still pending (`approval`). The approval is still
    open: wait again, or cancel it if the answer is no longer needed."""

    default_code = "approval_wait_timeout"

    def __init__(self, approval: Approval, waited_seconds: float) -> None:
        super().__init__(f"Approval {approval.id} is still pending after {waited_seconds:.0f} s.")
        self.approval = approval


class WebhookVerificationError(AgentCalError):
    """A webhook delivery did not verify (bad or missing signature, or a timestamp outside the
    tolerance). Answer it with 400 and do not act on its content."""

    default_code = "webhook_verification_failed"


# --- The retry rule ---------------------------------------------------------------------------------------


def is_retryable(error: AgentCalError) -> bool:
    """The one retry rule: no answer, 429 rate_limited, 502/503/504, and an earlier attempt of the same
    call still running. Never a quota (waiting is the agent's decision), nor a pause (423: a person
    decides), nor any other 4xx: a 409, 412 or 422 means the world differs from the agent's plan, and
    repeating the plan cannot fix that."""
    if isinstance(error, QuotaExceeded):
        return False
    if isinstance(error, APIConnectionError | RateLimited | IdempotencyInProgress):
        return True
    return error.status in (502, 503, 504)
