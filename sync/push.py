"""Push notifications from providers: they carry no event data and only ask for a sync, so each one is
checked (it must present the channel's secret) and then enqueues the same sync as the schedule.
Duplicated or out-of-order notifications are harmless: the sync reads whatever changed since the
stored token, and finds nothing new the second time.

Google (developers.google.com/calendar/api/guides/push): `X-Goog-Channel-ID`, `X-Goog-Channel-Token`
(our secret), `X-Goog-Resource-ID`, `X-Goog-Resource-State` (`sync` when the channel opens, then
`exists`). A notification we cannot match is refused (404/403) and logged; Google stops retrying.
"""

from __future__ import annotations

import hmac
import logging

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agentcal.clock import server_now
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from sync.google_provider import push_secret_hash
from sync.models import Connection, Provider
from sync.services import request_sync

logger = logging.getLogger(__name__)


@csrf_exempt  # a provider's server calls it; the channel secret is the check
@require_POST
def google_notification(request: HttpRequest) -> HttpResponse:
    channel_id = request.headers.get("X-Goog-Channel-ID", "")
    token = request.headers.get("X-Goog-Channel-Token", "")
    resource_id = request.headers.get("X-Goog-Resource-ID", "")
    state = request.headers.get("X-Goog-Resource-State", "")
    connection = (
        Connection.objects.filter(provider=Provider.GOOGLE, push_id=channel_id).first()
        if channel_id
        else None
    )
    if connection is None:
        return _refused(None, f"unknown Google channel {channel_id[:80]!r}", status=404)
    # The resource id is known once watch() has answered; the handshake may come before that.
    opening = state == "sync" and not connection.push_resource_id
    if not hmac.compare_digest(push_secret_hash(token), connection.push_secret_hash) or (
        resource_id != connection.push_resource_id and not opening
    ):
        return _refused(connection, "wrong channel token or resource id", status=403)
    if state == "sync":
        return HttpResponse(status=200)  # the channel opened; nothing changed yet
    Connection.objects.filter(pk=connection.pk).update(last_push_at=server_now())
    request_sync(connection.pk)
    return HttpResponse(status=200)


def _refused(connection: Connection | None, why: str, *, status: int) -> HttpResponse:
    """A notification we cannot trust: refused, logged and audited (someone may be probing)."""
    logger.warning("push refused (%s): %s", connection.public_id if connection else "-", why)
    audit_record(
        event_type=AuditEvent.PUSH_REJECTED,
        outcome=Outcome.REJECTED,
        actor=None,
        workspace_id=connection.workspace_id if connection else None,
        calendar_public_id=connection.calendar.public_id if connection else "",
        http_status=status,
        failure_reason="push_not_verified",
        details={"provider": "google", "why": why, "connection": connection.public_id if connection else ""},
    )
    return HttpResponse(status=status)
