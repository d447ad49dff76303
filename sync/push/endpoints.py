"""The push endpoints: a provider's notification carries no event data and only asks for a sync, so
each is checked (it must present the channel's secret, sync.push.channels) and then enqueues the same
sync as the schedule; duplicates and reordering are harmless. Google: developers.google.com/calendar/
api/guides/push; Graph: learn.microsoft.com/graph/change-notifications-delivery-webhooks and
/graph/change-notifications-lifecycle-events. What a request may cost is bounded before it is read:
a per-peer request budget (429), a cap on a Graph delivery's notifications (413), one look-up for the
subscriptions it names, and audited refusals within a per-peer budget (the rest only counted).
docs/architecture.md ("Upstream sync") has the design.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agentcal.clock import server_now
from agentcal.metrics import PUSH_UNAUDITED
from agentcal.rate_limits import RateLimiter, limiter_for
from agentcal.text import is_storable
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from sync.models import Connection, ConnectionStatus, Provider
from sync.push.channels import push_secret_hash
from sync.services import request_sync

logger = logging.getLogger(__name__)

# Graph's validation tokens are a sentence and a request id; anything much longer is not Graph's.
MAX_VALIDATION_TOKEN = 1024
# The column's length: a longer subscription id (or channel id) names no connection, so it is not looked up.
MAX_PUSH_ID = Connection._meta.get_field("push_id").max_length or 256


@csrf_exempt  # a provider's server calls it; the channel secret is the check
@require_POST
def google_notification(request: HttpRequest) -> HttpResponse:
    if not _peer_limiter().allow(_peer(request)):
        return _rate_limited("google")
    channel_id = request.headers.get("X-Goog-Channel-ID", "")
    token = request.headers.get("X-Goog-Channel-Token", "")
    resource_id = request.headers.get("X-Goog-Resource-ID", "")
    state = request.headers.get("X-Goog-Resource-State", "")
    connection = (
        Connection.objects.filter(provider=Provider.GOOGLE, push_id=channel_id).first()
        if channel_id and len(channel_id) <= MAX_PUSH_ID and is_storable(channel_id)
        else None
    )
    if connection is None:
        return _refused(
            request, None, f"unknown Google channel {channel_id[:80]!r}", status=404, provider="google"
        )
    # The resource id is known once watch() has answered; the handshake may come before that.
    opening = state == "sync" and not connection.push_resource_id
    if not hmac.compare_digest(push_secret_hash(token), connection.push_secret_hash) or (
        resource_id != connection.push_resource_id and not opening
    ):
        return _refused(
            request, connection, "wrong channel token or resource id", status=403, provider="google"
        )
    if state == "sync":
        return HttpResponse(status=200)  # the channel opened; nothing changed yet
    Connection.objects.filter(pk=connection.pk).update(last_push_at=server_now())
    _sync_unless_revoked(connection)
    return HttpResponse(status=200)


@csrf_exempt  # Graph calls it; each notification's clientState is the check
@require_POST
def microsoft_notification(request: HttpRequest) -> HttpResponse:
    told = _graph_delivery(request)
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
    told = _graph_delivery(request)
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


# The connections a Graph delivery verified, by pk, each with its notifications.
Told = dict[int, tuple[Connection, list[dict[str, Any]]]]


def _graph_delivery(request: HttpRequest) -> Told | HttpResponse:
    """What both Graph URLs do first: the sender's budget, Graph's validation handshake, then the
    verified notifications (or the answer that ends the request)."""
    if not _peer_limiter().allow(_peer(request)):
        return _rate_limited("microsoft")
    if "validationToken" in request.GET:
        return _validation_echo(request)
    return _verified_graph_notifications(request)


def _verified_graph_notifications(request: HttpRequest) -> Told | HttpResponse:
    """The connections whose subscriptions sent these notifications, each verified by its clientState,
    with their notifications; or the refusal (audited) when none is. A forged item among genuine ones is
    refused and audited without dropping the rest; one audit row per delivery, not per item."""
    try:
        body = json.loads(request.body)
    except ValueError:
        body = None
    items = body.get("value") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return _refused(request, None, "not a Graph notification", status=400, provider="microsoft")
    limit = settings.SYNC_PUSH_MAX_GRAPH_NOTIFICATIONS
    if len(items) > limit:
        # Refused whole and before any query: what a request costs must not grow with what it claims.
        # Graph sends several notifications in one POST's `value` but documents no maximum
        # (learn.microsoft.com/graph/api/resources/changenotificationcollection), and retries a delivery
        # answered with an error for up to 4 hours (learn.microsoft.com/graph/change-notifications-delivery-
        # webhooks, "HTTP codes and retry logic"); should a genuine one ever be this large, the
        # connections' fallback polling still brings their changes in.
        return _refused(
            request,
            None,
            f"{len(items)} notifications in one request (at most {limit})",
            status=413,
            provider="microsoft",
        )
    if not all(isinstance(item, dict) for item in items):
        return _refused(request, None, "not a Graph notification", status=400, provider="microsoft")
    named = [str(item.get("subscriptionId") or "") for item in items]
    # One query for every subscription named (each once); an id no connection could store is not asked for.
    wanted = {sid for sid in named if sid and len(sid) <= MAX_PUSH_ID and is_storable(sid)}
    subscribed = (
        {
            connection.push_id: connection
            for connection in Connection.objects.filter(
                provider=Provider.MICROSOFT, push_id__in=wanted
            ).select_related("calendar")
        }
        if wanted
        else {}
    )
    told: Told = {}
    refusal: HttpResponse | None = None
    for item, subscription_id in zip(items, named, strict=True):
        connection = subscribed.get(subscription_id)
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
            refusal = _refused(request, connection, why, status=status, provider="microsoft")
    if not told and refusal is not None:
        return refusal
    return told


def _sync_unless_revoked(connection: Connection) -> None:
    """A revoked connection is never retried on its own: its channel's or subscription's last
    notifications (until it expires) are acknowledged and change nothing, not even a token refresh."""
    if connection.status != ConnectionStatus.REVOKED:
        request_sync(connection.pk)


def _refused(
    request: HttpRequest, connection: Connection | None, why: str, *, status: int, provider: str
) -> HttpResponse:
    """A notification we cannot trust: refused, and logged and audited (someone may be probing) within
    its peer's budget of audited refusals; past it only counted, so a flood leaves no trail of rows."""
    if not _refusal_audit_limiter().allow(_peer(request)):
        PUSH_UNAUDITED.labels(provider, "over_audit_budget").inc()
        return HttpResponse(status=status)
    logger.warning("push refused (%s): %s", connection.public_id if connection else "-", why)
    audit_record(
        event_type=AuditEvent.PUSH_REJECTED,
        outcome=Outcome.REJECTED,
        actor=None,
        workspace_id=connection.workspace_id if connection else None,
        calendar_public_id=connection.calendar.public_id if connection else "",
        http_status=status,
        failure_reason="push_not_verified",
        details={
            "provider": provider,
            "why": why,
            "connection": connection.public_id if connection else "",
            "peer_ip": _peer(request),
        },
    )
    return HttpResponse(status=status)


def _peer(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR", ""))


def _rate_limited(provider: str) -> HttpResponse:
    """Over the peer's request budget: refused unread and not audited, only counted. A genuine provider
    retries (Graph) or the connection's fallback polling brings the change in (Google)."""
    PUSH_UNAUDITED.labels(provider, "rate_limited").inc()
    response = HttpResponse(status=429)
    response["Retry-After"] = str(math.ceil(60 / settings.SYNC_PUSH_MAX_REQUESTS_PER_MINUTE_PER_IP))
    return response


def _peer_limiter() -> RateLimiter:
    """One token bucket per peer address, for every push request whatever it turns out to be."""
    return limiter_for("SYNC_PUSH_MAX_REQUESTS_PER_MINUTE_PER_IP")


def _refusal_audit_limiter() -> RateLimiter:
    """One token bucket per peer address: the push refusals that are audited."""
    return limiter_for("SYNC_PUSH_AUDITED_REFUSALS_PER_MINUTE_PER_IP")
