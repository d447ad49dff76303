"""From a failed response to the error that names its problem: the table of problem codes and HTTP
statuses, and `error_from_response`, which the transport calls for every non-2xx answer."""

from __future__ import annotations

from typing import Any

from agentcal_client.errors import (
    AgentCalError,
    AgentPaused,
    ApprovalAlreadyDecided,
    ApprovalExists,
    ApprovalExpired,
    AuthenticationError,
    BookingNotLive,
    BookingTooLong,
    Conflict,
    HoldAlreadyCommitted,
    HoldAwaitingApproval,
    HoldEvicted,
    HoldExpired,
    HoldReleased,
    HoldTokenMismatch,
    IdempotencyInProgress,
    IdempotencyKeyReused,
    InsufficientNotice,
    InsufficientScope,
    InvalidRange,
    InvalidRequest,
    NoSlotFound,
    NotFound,
    NotOwner,
    OutsideWorkingHours,
    PayloadTooLarge,
    PermissionDenied,
    PreconditionFailed,
    PriorityNotAllowed,
    QuotaExceeded,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    SlotConflict,
    StaleFencingToken,
    UnprocessableEntity,
)

_BY_CODE: dict[str, type[AgentCalError]] = {
    cls.default_code: cls
    for cls in (
        InvalidRequest,
        InvalidRange,
        AuthenticationError,
        PermissionDenied,
        InsufficientScope,
        PriorityNotAllowed,
        NotOwner,
        HoldTokenMismatch,
        NotFound,
        SlotConflict,
        NoSlotFound,
        HoldExpired,
        HoldEvicted,
        HoldReleased,
        HoldAlreadyCommitted,
        HoldAwaitingApproval,
        StaleFencingToken,
        BookingNotLive,
        IdempotencyInProgress,
        ApprovalExists,
        ApprovalAlreadyDecided,
        ApprovalExpired,
        PreconditionFailed,
        PayloadTooLarge,
        BookingTooLong,
        OutsideWorkingHours,
        InsufficientNotice,
        IdempotencyKeyReused,
        AgentPaused,
        RateLimited,
        QuotaExceeded,
        ServiceUnavailable,
    )
}
_BY_STATUS: dict[int, type[AgentCalError]] = {
    400: InvalidRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    413: PayloadTooLarge,
    422: UnprocessableEntity,
    423: AgentPaused,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_class_for(status: int, code: str | None) -> type[AgentCalError]:
    """The class for a problem: the one named by its code, else the one for its HTTP status. A code
    whose class belongs to another status (a proxy reusing a name) counts for nothing."""
    family = _BY_STATUS.get(status) or (ServerError if status >= 500 else AgentCalError)
    by_code = _BY_CODE.get(code or "")
    return by_code if by_code is not None and issubclass(by_code, family) else family


def error_from_response(
    status: int,
    body: Any,
    *,
    text: str = "",
    request_id: str | None = None,
    retry_after: float | None = None,
) -> AgentCalError:
    """Build the error for a non-2xx response; `body` is the parsed JSON (anything, when the response was
    not a problem document: a proxy's HTML page, say), `text` the raw text for the detail then."""
    problem: dict[str, Any] = body if isinstance(body, dict) else {}
    code = problem.get("error") if isinstance(problem.get("error"), str) else None
    detail = problem.get("detail")
    if not isinstance(detail, str) or not detail:
        detail = text.strip()[:300] or f"HTTP {status}"
    cls = error_class_for(status, code)
    return cls(
        detail,
        status=status,
        code=code or f"http_{status}",
        body=problem,
        request_id=request_id,
        retry_after=retry_after,
    )
