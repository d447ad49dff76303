"""Calendar writes: creating a calendar and changing its settings, audited in the same transaction.
(Writes to holds and bookings go through bookings.engine.)"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from bookings.models import Calendar
from workspaces.actor import Actor


@transaction.atomic(durable=True)
def calendar_create(*, actor: Actor, name: str, **settings: Any) -> Calendar:
    calendar = Calendar.objects.create(workspace=actor.workspace, name=name, **settings)
    audit_record(
        event_type=AuditEvent.CALENDAR_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        calendar_public_id=calendar.public_id,
        details={"name": name, **settings},
    )
    return calendar


@transaction.atomic(durable=True)
def calendar_update(*, actor: Actor, calendar: Calendar, changes: dict[str, Any]) -> Calendar:
    # Settings apply to future writes only: a commit keeps the bump window it was given.
    for name, value in changes.items():
        setattr(calendar, name, value)
    calendar.save(update_fields=[*changes, "updated_at"])
    audit_record(
        event_type=AuditEvent.CALENDAR_UPDATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        calendar_public_id=calendar.public_id,
        details={"changes": changes},
    )
    return calendar
