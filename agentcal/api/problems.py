"""One place that turns every API error into an RFC 9457 problem+json response, and audits it."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.http import Http404, HttpRequest, HttpResponse
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import exceptions as drf
from rest_framework.response import Response

from agentcal.errors import (
    AgentCalError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    ServiceUnavailable,
    Unauthenticated,
    WrongKeysRateLimited,
)
from agentcal.ids import is_public_id
from agentcal.json_codec import dumps
from agentcal.metrics import AUTH_UNAUDITED
from agentcal.rate_limits import limiter_for
from agentcal.text import storable_text
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from workspaces.actor import Actor
from workspaces.limits import note_refusal

logger = logging.getLogger(__name__)
PROBLEM_CONTENT_TYPE = "application/problem+json"
AUDITED_PATH_MAX_CHARS = 512
# A lost or refused connection (and a deadlock or serialization failure, which PostgreSQL reports the
# same way): the request was rolled back and may be retried as it is.
UNREACHABLE = (OperationalError, InterfaceError, BrokerError, RedisConnectionError, RedisTimeoutError)


class ProblemResponse(Response):
    def __init__(self, error: AgentCalError, headers: dict[str, str] | None = None) -> None:
        super().__init__(
            error.problem(), status=error.status, headers=headers, content_type=PROBLEM_CONTENT_TYPE
        )


def as_domain_error(exc: Exception) -> AgentCalError | None:
    """Map framework exceptions onto the domain errors the API documents."""
    if isinstance(exc, AgentCalError):
        return exc
    if isinstance(exc, UNREACHABLE):
        return ServiceUnavailable(
            "The database or the message broker did not answer; the request was rolled back. "
            "Retry (with the same Idempotency-Key) shortly.",
            retryable=True,
        )
    if isinstance(exc, RequestDataTooBig):  # Django's own cap, met before our parser's
        limit = settings.API_MAX_BODY_BYTES
        return PayloadTooLarge(f"The body is over the {limit}-byte limit.", max_bytes=limit)
    if isinstance(exc, Http404 | drf.NotFound):
        return NotFound()
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        return Unauthenticated()
    if isinstance(exc, drf.ValidationError):
        error = InvalidRequest("Some fields are missing or invalid; see `errors`.", errors=exc.detail)
        return error
    if isinstance(exc, drf.ParseError):
        return _generic(400, "malformed_json", "The body is not valid JSON", str(exc.detail))
    if isinstance(exc, drf.UnsupportedMediaType):
        return _generic(
            415, "unsupported_media_type", "Send JSON (Content-Type: application/json)", str(exc.detail)
        )
    if isinstance(exc, drf.MethodNotAllowed):
        return _generic(405, "method_not_allowed", "Method not allowed", str(exc.detail))
    if isinstance(exc, drf.NotAcceptable):
        return _generic(406, "not_acceptable", "Not acceptable", str(exc.detail))
    if isinstance(exc, drf.Throttled):
        return _generic(
            429, "rate_limited", "Too many requests", str(exc.detail), retry_after=getattr(exc, "wait", None)
        )
    if isinstance(exc, drf.PermissionDenied | DjangoPermissionDenied):
        return _generic(403, "forbidden", "Forbidden", str(exc))
    if isinstance(exc, drf.APIException):
        return _generic(exc.status_code, str(exc.default_code), "Request failed", str(exc.detail))
    return None


def _generic(status: int, code: str, title: str, detail: str, **extra: Any) -> AgentCalError:
    return _problem_class(status, code, title)(detail, **extra)


@functools.cache  # a few dozen at most (DRF's exceptions and ours); a class made per call lived in cycles
def _problem_class(status: int, code: str, title: str) -> type[AgentCalError]:
    return type(f"Problem{status}", (AgentCalError,), {"status": status, "code": code, "title": title})


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    error = as_domain_error(exc)
    if error is None:
        return None  # unexpected: Django logs it and answers 500 (see agentcal.urls handler500)
    request = context.get("request")
    view = context.get("view")
    if isinstance(error, ServiceUnavailable):
        logger.warning("503 for %s: %s", getattr(request, "path", "?"), exc)
        _drop_broken_connection()
    if not error.audited and _within_audit_budget(error, request):
        try:
            _audit_refusal(error, request, view, exc)
        except DatabaseError:
            if not isinstance(error, ServiceUnavailable):
                raise
            logger.warning("the refusal could not be audited: the database is still unreachable")
    headers = {}
    if error.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="agentcal"'
    if error.status == 409 and error.code == "idempotency_in_progress":
        headers["Retry-After"] = "1"
    if (
        isinstance(error, ServiceUnavailable | QuotaExceeded | RateLimited)
        and error.retry_after_seconds is not None
    ):
        headers["Retry-After"] = str(error.retry_after_seconds)
    _drop_tracebacks(exc)
    return ProblemResponse(error, headers=headers)


def _drop_tracebacks(exc: BaseException) -> None:
    """An exception answered as a problem is done with: its traceback (the frames it was raised through,
    whose locals often name the exception itself: `error = …; raise error`) and the exceptions it was
    raised while handling are dropped, so that what they held is freed by reference counting, not left
    in cycles for the collector (docs/performance-notes.md, "Reference cycles")."""
    pending = [exc]
    while pending:  # ends: each exception's links are cut as it is visited
        found = pending.pop()
        pending += [linked for linked in (found.__cause__, found.__context__) if linked is not None]
        found.__traceback__ = found.__cause__ = found.__context__ = None


def _within_audit_budget(error: AgentCalError, request: Any) -> bool:
    """Refusals before a key was proved are audited within their peer address's budget, counted past it:
    whoever holds no key cannot fill the audit trail (or its table) at the price of a request. Refusals
    by an agent's own limits are audited once per window (a runaway agent meets them by the thousand)."""
    if error.agent_limit:
        actor = getattr(request, "_user", None)
        return note_refusal(actor if isinstance(actor, Actor) else None, error)
    if not isinstance(error, Unauthenticated | WrongKeysRateLimited):
        return True
    peer = getattr(request, "META", {}).get("REMOTE_ADDR", "")
    if limiter_for("API_AUDITED_AUTH_REFUSALS_PER_MINUTE_PER_IP").allow(peer):
        return True
    AUTH_UNAUDITED.labels(error.code).inc()
    return False


def _drop_broken_connection() -> None:
    """A connection the server terminated cannot be used again, not even to release an idempotency
    claim or audit the refusal; closing it makes the next statement open a fresh one."""
    raw = connection.connection
    if not connection.in_atomic_block and (raw is None or raw.closed or getattr(raw, "broken", False)):
        connection.close()


def _audit_refusal(error: AgentCalError, request: Any, view: Any, original: Exception) -> None:
    """Every refused API request leaves an audit row, written after the view's transaction is gone."""
    actor = getattr(request, "_user", None) if request is not None else None
    actor = actor if isinstance(actor, Actor) else None
    action = getattr(view, "audit_action", None)
    event = AuditEvent.REQUEST_REJECTED
    if error.status == 401 or isinstance(error, WrongKeysRateLimited):
        event = AuditEvent.AUTH_REJECTED
    elif action:
        # Every view's action has its member (tests/audit/test_event_types.py); one without it is still
        # audited, as a refused request.
        with contextlib.suppress(ValueError):
            event = AuditEvent(f"{action}.rejected")
    # Only well-formed ids go into the id columns; whatever was sent is in the path, clipped.
    kwargs = {
        name: value for name, value in (getattr(view, "kwargs", {}) or {}).items() if is_public_id(value)
    }
    django_request = getattr(request, "_request", request)
    with transaction.atomic():
        audit_record(
            event_type=event,
            outcome=Outcome.REJECTED,
            actor=actor,
            calendar_public_id=str(kwargs.get("calendar_id", "")),
            reservation_public_id=str(kwargs.get("hold_id") or kwargs.get("booking_id") or ""),
            http_status=error.status,
            failure_reason=error.code,
            key_prefix=getattr(original, "key_prefix", ""),
            workspace_id=getattr(original, "workspace_id", None),
            request_id=getattr(django_request, "request_id", ""),
            details={
                "method": getattr(django_request, "method", ""),
                "path": storable_text(getattr(django_request, "path", ""), AUDITED_PATH_MAX_CHARS),
                # One row stands for its window's refusals by this limit (the metrics count them all).
                **({"limit": error.agent_limit} if error.agent_limit else {}),
            },
        )
    error.audited = True


def problem_json_response(error: AgentCalError) -> HttpResponse:
    """A problem answered outside DRF (no route, a server error, the first middleware's refusals),
    written as DRF's renderer writes every other: compact UTF-8."""
    problem = error.problem()
    body = dumps(problem) or json.dumps(problem, separators=(",", ":"), ensure_ascii=False).encode()
    return HttpResponse(body, status=error.status, content_type=PROBLEM_CONTENT_TYPE)


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return problem_json_response(NotFound(f"No endpoint at {request.path}."))


def api_server_error(request: HttpRequest) -> HttpResponse:
    error = _generic(
        500, "internal_error", "Internal server error", "Something went wrong; it has been logged."
    )
    return problem_json_response(error)


def length_required() -> HttpResponse:
    return problem_json_response(
        _generic(
            411,
            "length_required",
            "Length required",
            "This server cannot read a chunked body; send Content-Length.",
        )
    )
