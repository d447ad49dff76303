"""Email to a workspace's owners (an approval waits, a calendar link broke): one message each, so
owners need not see each other's addresses. A mail failure is logged, never raised: whatever the
email announces is on the dashboard either way."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import tzinfo

from django.conf import settings
from django.core.mail import get_connection, send_mail

from accounts.models import Membership, Role
from agentcal.moments import zone_named
from workspaces.models import Workspace

logger = logging.getLogger(__name__)

EMAIL_TIMEOUT_SECONDS = 10


def owner_emails(workspace: Workspace) -> list[str]:
    return [email for email, _ in owner_recipients(workspace)]


def owner_recipients(workspace: Workspace) -> list[tuple[str, tzinfo | None]]:
    """Each active owner's address with their own time zone (None until a browser told it)."""
    zones: dict[str, tzinfo | None] = {}
    rows = (
        Membership.objects.filter(workspace=workspace, role=Role.OWNER, user__is_active=True)
        .exclude(user__email="")
        .values_list("user__email", "user__profile__time_zone")
    )
    for email, zone_name in rows:
        zones[email] = zone_named(zone_name)
    return sorted(zones.items())


# A body that mentions a moment is built per recipient, so each owner reads it in their own zone.
Body = str | Callable[[tzinfo | None], str]


def email_owners(workspace: Workspace, subject: str, body: Body, *, about: str) -> None:
    """Send `subject`/`body` to every owner of the workspace; `about` names it in the logs."""
    recipients = owner_recipients(workspace)
    if not recipients:
        logger.warning("%s: workspace %s has no owner to notify", about, workspace.slug)
        return
    connection = get_connection(timeout=getattr(settings, "EMAIL_TIMEOUT", None) or EMAIL_TIMEOUT_SECONDS)
    for recipient, zone in recipients:
        try:
            text = body(zone) if callable(body) else body
            send_mail(subject, text, None, [recipient], connection=connection)
        except Exception:
            logger.exception("could not email %s to %s", about, recipient)
