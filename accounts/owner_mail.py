"""Email to a workspace's owners (an approval waits, a calendar link broke): one message each, so
owners need not see each other's addresses. A mail failure is logged, never raised: whatever the
email announces is on the dashboard either way."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import get_connection, send_mail

from accounts.models import Membership, Role
from workspaces.models import Workspace

logger = logging.getLogger(__name__)

EMAIL_TIMEOUT_SECONDS = 10


def owner_emails(workspace: Workspace) -> list[str]:
    return sorted(
        set(
            Membership.objects.filter(workspace=workspace, role=Role.OWNER, user__is_active=True)
            .exclude(user__email="")
            .values_list("user__email", flat=True)
        )
    )


def email_owners(workspace: Workspace, subject: str, body: str, *, about: str) -> None:
    """Send `subject`/`body` to every owner of the workspace; `about` names it in the logs."""
    recipients = owner_emails(workspace)
    if not recipients:
        logger.warning("%s: workspace %s has no owner to notify", about, workspace.slug)
        return
    connection = get_connection(timeout=getattr(settings, "EMAIL_TIMEOUT", None) or EMAIL_TIMEOUT_SECONDS)
    for recipient in recipients:
        try:
            send_mail(subject, body, None, [recipient], connection=connection)
        except Exception:
            logger.exception("could not email %s to %s", about, recipient)
