"""Push notifications from providers: they carry no event data and only ask for a sync, so each one is
checked (it must present the channel's secret) and then enqueues the same sync as the schedule.
Duplicated or out-of-order notifications are harmless: the sync reads whatever changed since the
stored token, and finds nothing new the second time.

Google (developers.google.com/calendar/api/guides/push): `X-Goog-Channel-ID`, `X-Goog-Channel-Token`
(our secret), `X-Goog-Resource-ID`, `X-Goog-Resource-State` (`sync` when the channel opens, then
`exists`). A notification we cannot match is refused (404/403) and logged; Google stops retrying.

Microsoft Graph (learn.microsoft.com/graph/change-notifications-delivery-webhooks and
/graph/change-notifications-lifecycle-events): creating a subscription, Graph first POSTs
`?validationToken=…` to each URL and wants the token back as text/plain within 10 seconds; that request
carries no subscription id or clientState, so it is echoed unconditionally (it reveals nothing and
changes nothing). Notifications then arrive as JSON `{"value": [...]}`, each naming its
`subscriptionId` and carrying our `clientState`; they are answered 202 within Graph's 3 seconds (the sync
itself runs on a worker). Lifecycle events go to their own URL: `reauthorizationRequired` and
`subscriptionRemoved` are handled by the sync they request (sync.services._keep_push_open renews, or
opens a new subscription), `missed` only asks for a sync.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agentcal.clock import server_now
from agentcal.text import is_storable
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from sync.google_provider import push_secret_hash
from sync.models import Connection, ConnectionStatus, Provider
from sync.services import request_sync

logger = logging.getLogger(__name__)

# Graph's validation tokens are a sentence and a request id; anything much longer is not Graph's.
MAX_VALIDATION_TOKEN = 1024


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
        return _refused(None, f"unknown Google channel {channel_id[:80]!r}", status=404, provider="google")
    # The resource id is known once watch() has answered; the handshake may come before that.
    opening = state == "sync" and not connection.push_resource_id
    if not hmac.compare_digest(push_secret_hash(token), connection.push_secret_hash) or (
        resource_id != connection.push_resource_id and not opening
    ):
        return _refused(connection, "wrong channel token or resource id", status=403, provider="google")
    if state == "sync":
        return HttpResponse(status=200)  # the channel opened; nothing changed yet
    Connection.objects.filter(pk=connection.pk).update(last_push_at=server_now())
    request_sync(connection.pk)
    return HttpResponse(status=200)


@csrf_exempt  # Graph calls it; each notification's clientState is the check
@require_POST
def microsoft_notification(request: HttpRequest) -> HttpResponse:
    if "validationToken" in request.GET:
        return _validation_echo(request)
    told = _verified_graph_notifications(request)
    if isinstance(told, HttpResponse):
        return told
    for connection, _items in told.values():  # one sync per connection, however many changes it was told
        Connection.objects.filter(pk=connection.pk).update(last_push_at=server_now())
        _sync_unless_revoked(connection)
    return HttpResponse(status=202)


@csrf_exempt
@require_POST
def microsoft_lifecycle(request: HttpRequest) -> HttpResponse:
    """reauthorizationRequired: the subscription stops unless renewed soon, so it counts as expiring now
    and the sync it asks for renews it. subscriptionRemoved: Graph dropped it; the sync opens a new one.
    missed: notifications were lost; the sync reads every change since the last one anyway."""
    if "validationToken" in request.GET:
        return _validation_echo(request)
    told = _verified_graph_notifications(request)
    if isinstance(told, HttpResponse):
        return told
    for connection, items in told.values():
        events = {item.get("lifecycleEvent") for item in items}
        same_subscription = Connection.objects.filter(pk=connection.pk, push_id=connection.push_id)
        if "subscriptionRemoved" in events:
            same_subscription.update(push_id="", push_secret_hash="", push_expires_at=None)
        elif "reauthorizationRequired" in events:
            same_subscription.update(push_expires_at=server_now())
        _sync_unless_revoked(connection)
    return HttpResponse(status=202)


def _validation_echo(request: HttpRequest) -> HttpResponse:
    """Graph's handshake: the token back, as plain text (never rendered as a page), and nothing else."""
    token = request.GET["validationToken"]
    if len(token) > MAX_VALIDATION_TOKEN:
        return HttpResponse(status=400)
    return HttpResponse(token, content_type="text/plain; charset=utf-8")


def _verified_graph_notifications(
    request: HttpRequest,
) -> dict[int, tuple[Connection, list[dict[str, Any]]]] | HttpResponse:
    """The connections whose subscriptions sent these notifications, each verified by its clientState,
    with their notifications; or the refusal (audited) when none is. A forged item among genuine ones is
    refused and audited without dropping the rest; one audit row per delivery, not per item."""
    try:
        body = json.loads(request.body)
    except ValueError:
        body = None
    items = body.get("value") if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        return _refused(None, "not a Graph notification", status=400, provider="microsoft")
    told: dict[int, tuple[Connection, list[dict[str, Any]]]] = {}
    refusal: HttpResponse | None = None
    for item in items:
        subscription_id = str(item.get("subscriptionId") or "")
        connection = (
            Connection.objects.filter(provider=Provider.MICROSOFT, push_id=subscription_id)
            .select_related("calendar")
            .first()
            if subscription_id and is_storable(subscription_id)
            else None
        )
        if connection is None:
            why, status = f"unknown Graph subscription {subscription_id[:80]!r}", 404
        elif not connection.push_secret_hash or not hmac.compare_digest(
            push_secret_hash(str(item.get("clientState") or "")), connection.push_secret_hash
        ):
            why, status = "wrong clientState", 403
        else:
            told.setdefault(connection.pk, (connection, []))[1].append(item)
            continue
        if refusal is None:
            refusal = _refused(connection, why, status=status, provider="microsoft")
    if not told and refusal is not None:
        return refusal
    return told


def _sync_unless_revoked(connection: Connection) -> None:
    """A revoked connection is never retried on its own: its subscription's last notifications (until
    it expires) are acknowledged and change nothing."""
    if connection.status != ConnectionStatus.REVOKED:
        request_sync(connection.pk)


def _refused(connection: Connection | None, why: str, *, status: int, provider: str) -> HttpResponse:
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
        details={"provider": provider, "why": why, "connection": connection.public_id if connection else ""},
    )
    return HttpResponse(status=status)
