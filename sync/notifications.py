"""Telling the workspace owners that a calendar link stopped working (a revoked grant, or syncs that
started failing): one email each, pointing at the calendar's page, where the link can be repaired."""

from __future__ import annotations

import functools
import logging

from django.conf import settings
from django.core.mail import get_connection, send_mail

from accounts.models import Membership, Role
from agentcal import broker
from sync.models import Connection, ConnectionStatus

logger = logging.getLogger(__name__)

EMAIL_TIMEOUT_SECONDS = 10
PROVIDER_NAMES = {"caldav": "CalDAV", "google": "Google Calendar", "microsoft": "Microsoft 365"}


def enqueue_owner_notification(connection_pk: int) -> None:
    """Email from a Celery worker; if the broker refuses the message, the publisher's thread sends it."""
    from sync.tasks import notify_owners

    broker.enqueue(
        notify_owners, (connection_pk,), fallback=functools.partial(connection_notify_owners, connection_pk)
    )


def connection_notify_owners(connection_pk: int) -> None:
    """A mail failure is logged, never raised: the dashboard shows the problem either way."""
    try:
        connection = Connection.objects.select_related("calendar", "workspace").get(pk=connection_pk)
        recipients = sorted(
            set(
                Membership.objects.filter(
                    workspace=connection.workspace, role=Role.OWNER, user__is_active=True
                )
                .exclude(user__email="")
                .values_list("user__email", flat=True)
            )
        )
        subject, body = _message(connection)
        mail_connection = get_connection(
            timeout=getattr(settings, "EMAIL_TIMEOUT", None) or EMAIL_TIMEOUT_SECONDS
        )
    except Exception:
        logger.exception("could not prepare the notification for connection %s", connection_pk)
        return
    for recipient in recipients:  # one message each: owners need not see each other's addresses
        try:
            send_mail(subject, body, None, [recipient], connection=mail_connection)
        except Exception:
            logger.exception("could not email connection %s's problem to %s", connection.public_id, recipient)


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
