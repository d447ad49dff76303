"""Audit rows for the engine's changes (same transaction) and refusals (after the rollback)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from agentcal.db import InsertBatch
from agentcal.errors import AgentCalError
from agentcal.metrics import WRITE_SECONDS
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.models import Calendar, Reservation
from bookings.spans import Span
from workspaces.actor import Actor

P = ParamSpec("P")
R = TypeVar("R")


def audit_rejections(event: AuditEvent) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Audit a domain error raised by an engine operation, after its transaction rolled back."""

    def decorate(operation: Callable[P, R]) -> Callable[P, R]:
        timer = WRITE_SECONDS.labels(operation.__name__)

        @functools.wraps(operation)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with timer.time():
                try:
                    return operation(*args, **kwargs)
                except AgentCalError as exc:
                    if not exc.audited:
                        _audit_rejection(event, exc, kwargs)
                    raise

        return wrapper

    return decorate


def _audit_rejection(event: AuditEvent, exc: AgentCalError, kwargs: dict[str, Any]) -> None:
    actor: Actor = kwargs["actor"]
    calendar = kwargs.get("calendar")
    # A write at a span names it; find-and-hold's refusal is about its search's window.
    span = kwargs.get("span") or getattr(kwargs.get("query"), "window", None)
    # One INSERT after the rollback; in autocommit it is its own transaction (no BEGIN/COMMIT).
    batch = InsertBatch()
    audit_record(
        event_type=event,
        outcome=Outcome.REJECTED,
        actor=actor,
        batch=batch,
        calendar_public_id=calendar.public_id if isinstance(calendar, Calendar) else "",
        reservation_public_id=str(kwargs.get("hold_id") or kwargs.get("booking_id") or ""),
        requested_start=span.start if isinstance(span, Span) else None,
        requested_end=span.end if isinstance(span, Span) else None,
        http_status=exc.status,
        failure_reason=exc.code,
        conflict_details=_conflict_details(exc),
    )
    batch.execute()
    exc.audited = True


def audit_reservation(
    event_type: AuditEvent,
    *,
    actor: Actor | None,
    row: Reservation,
    reservation_public_id: str,
    details: dict[str, Any] | None = None,
    batch: InsertBatch | None = None,
) -> None:
    """Audit a successful change to one hold or booking, described by its primary row."""
    audit_record(
        event_type=event_type,
        outcome=Outcome.SUCCESS,
        actor=actor,
        batch=batch,
        workspace_id=row.calendar.workspace_id,
        calendar_public_id=row.calendar.public_id,
        reservation_public_id=reservation_public_id,
        requested_start=row.start_time,
        requested_end=row.end_time,
        fencing_token=row.fencing_token,
        details=details,
    )


def _conflict_details(exc: AgentCalError) -> dict[str, Any] | None:
    keys = (
        "conflicting",
        "conflicting_bucket",
        "held_by_priority",
        "caller_priority",
        "alternatives",
        "current_version",
        "max_allowed_minutes",
        "requested_minutes",
        "current_fencing_token",
    )
    details = {k: exc.extra[k] for k in keys if k in exc.extra}
    return details or None
