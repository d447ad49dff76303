"""Telling the workspace owners that a calendar link stopped working (a revoked grant, or syncs that
started failing): one email each, pointing at the calendar's page, where the link can be repaired."""

from __future__ import annotations

import logging

from django.conf import settings

from accounts.owner_mail import email_owners
from sync.models import Connection, ConnectionStatus

logger = logging.getLogger(__name__)
PROVIDER_NAMES = {"caldav": "CalDAV", "google": "Google Calendar", "microsoft": "Microsoft 365"}


def connection_notify_owners(connection_pk: int) -> None:
    try:
        connection = Connection.objects.select_related("calendar", "workspace").get(pk=connection_pk)
        subject, body = _message(connection)
    except Exception:
        logger.exception("could not prepare the notification for connection %s", connection_pk)
        return
    email_owners(connection.workspace, subject, body, about=f"connection {connection.public_id}'s problem")


def _message(connection: Connection) -> tuple[str, str]:
    provider = PROVIDER_NAMES.get(connection.provider, connection.provider)
    calendar = connection.calendar
    page = f"{settings.DASHBOARD_BASE_URL}/w/{connection.workspace.slug}/calendars/{calendar.public_id}"
    if connection.status == ConnectionStatus.REVOKED:
        subject = f"AgentCal lost access to {calendar.name}'s {provider} calendar"
        what = (
            f"{provider} no longer accepts AgentCal's access to the calendar linked to {calendar.name} "
            "(it was revoked, or the account's password changed). Nothing is synced until someone "
            "connects it again."
        )
    else:
        subject = f"Syncing {calendar.name} with {provider} is failing"
        what = f"AgentCal cannot sync {calendar.name} with its {provider} calendar; it keeps retrying."
    body = (
        f"{what}\n\nMeanwhile, busy time already synced keeps blocking agents, but changes made in "
        f"{provider} since then are not seen.\n\nLast error: {connection.last_error[:300]}\n\n"
        f"The calendar's page: {page}\n"
    )
    return subject, body
