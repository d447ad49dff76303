"""What a push request may cost whoever sends it (sync/push/endpoints.py): nobody needs a key to call the
hooks, so each peer address has a request budget, a Graph delivery a cap on its notifications, and the
subscriptions it names one look-up. Everything over real HTTP to the live server, which runs in this
process: the statements it sends are seen on every connection this process opens."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from django.db.backends.signals import connection_created
from prometheus_client import REGISTRY

from sync.models import Connection
from tests.helpers import audit_rows, http_client
from tests.sync.oauth_linking import MicrosoftLinked, synced


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every statement run meanwhile on a connection this process opens: the live server serves each
    request on a thread of its own, which opens its own connection (from the pool) for it."""
    seen: list[str] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    def arm(sender: Any, connection: Any, **kwargs: Any) -> None:
        connection.execute_wrappers.append(record)

    connection_created.connect(arm)
    try:
        yield seen
    finally:
        connection_created.disconnect(arm)


def connection_lookups(seen: list[str]) -> list[str]:
    return [sql for sql in seen if sql.lstrip().upper().startswith("SELECT") and '"sync_connection"' in sql]


def graph_delivery(*items: dict[str, Any]) -> bytes:
    return json.dumps({"value": list(items)}, separators=(",", ":")).encode()


@pytest.mark.usefixtures("transactional_db")
def test_it_refuses_a_hundred_thousand_graph_notifications_fast_and_unread(live_server: Any) -> None:
    # As many as fit in the largest body Django reads (2.5 MB): ids repeat, which a look-up would not mind.
    body = graph_delivery(*({"subscriptionId": f"{n % 4096:x}"} for n in range(100_000)))
    assert len(body) <= django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    hook = f"{live_server.url}/hooks/microsoft"
    assert httpx.post(hook, content=b"not json").status_code == 400  # the server warmed up
    with statements() as seen:
        started = time.perf_counter()
        answer = httpx.post(hook, content=body, timeout=30)
        elapsed = time.perf_counter() - started

    assert answer.status_code == 413
    assert elapsed < 1.0, f"answered in {elapsed:.2f} s"
    assert connection_lookups(seen) == [], "refused before any look-up"
    [_, row] = audit_rows(event_type="sync.push.rejected")
    assert row.http_status == 413 and "100000 notifications" in row.details["why"]


def test_a_full_delivery_is_looked_up_in_one_query_and_its_genuine_notification_still_syncs(
    mslinked: MicrosoftLinked,
    live_server: Any,
) -> None:
    synced(mslinked)
    connection = Connection.objects.get(pk=mslinked.pk)
    subscription = mslinked.fake.subscription(connection.push_id)
    assert subscription is not None
    genuine = {
        "subscriptionId": connection.push_id,
        "clientState": subscription.client_state,
        "changeType": "updated",
    }
    made_up = [{"subscriptionId": f"made-up-{n}", "clientState": "guess"} for n in range(995)]
    odd = [
        {"subscriptionId": "made-up-1"},  # twice: asked for once
        {"subscriptionId": "nul\x00"},  # no connection could store it: not asked for
        {"subscriptionId": "x" * 300},  # longer than any stored id: not asked for
        {"clientState": "guess"},  # names none
    ]
    items: list[dict[str, Any]] = [*made_up, *odd, genuine]
    assert len(items) == django_settings.SYNC_PUSH_MAX_GRAPH_NOTIFICATIONS

    with statements() as seen:
        started = time.perf_counter()
        answer = httpx.post(f"{live_server.url}/hooks/microsoft", content=graph_delivery(*items))
        elapsed = time.perf_counter() - started

    assert answer.status_code == 202, "the genuine notification is acted on"
    assert elapsed < 1.0, f"answered in {elapsed:.2f} s"
    [lookup] = connection_lookups(seen)
    assert "IN" in lookup
    assert Connection.objects.get(pk=mslinked.pk).last_push_at is not None
    [row] = audit_rows(event_type="sync.push.rejected")
    assert row.http_status == 404, "the forged items are refused with one row for the delivery"

    # Made-up ids alone: refused, after the same one look-up.
    with statements() as seen:
        refused = httpx.post(f"{live_server.url}/hooks/microsoft/lifecycle", content=graph_delivery(*made_up))
    assert refused.status_code == 404
    assert len(connection_lookups(seen)) == 1


@pytest.mark.usefixtures("transactional_db")
def test_a_peer_over_its_request_budget_is_answered_429_unread(live_server: Any, settings: Any) -> None:
    settings.SYNC_PUSH_MAX_REQUESTS_PER_MINUTE_PER_IP = 3
    hook = f"{live_server.url}/hooks/microsoft"
    with statements() as seen:
        answers = [httpx.post(hook, content=b"not json") for _ in range(3)]
        limited = [
            httpx.post(hook, content=graph_delivery({"subscriptionId": "made-up"})),
            httpx.post(f"{hook}/lifecycle", content=graph_delivery({"subscriptionId": "made-up"})),
            httpx.post(f"{hook}?validationToken=hello"),
        ]
    assert [answer.status_code for answer in answers] == [400, 400, 400]
    assert [answer.status_code for answer in limited] == [429, 429, 429]
    assert {answer.headers["retry-after"] for answer in limited} == {"20"}
    assert connection_lookups(seen) == []
    assert len(audit_rows(event_type="sync.push.rejected")) == 3, "the refusals over budget write nothing"


def unaudited(provider: str, reason: str) -> float:
    """The live server runs in this process: its counters are this process's."""
    value = REGISTRY.get_sample_value(
        "agentcal_push_unaudited_refusals_total", {"provider": provider, "reason": reason}
    )
    return value or 0.0


@pytest.mark.usefixtures("transactional_db")
def test_a_flood_of_forged_pushes_leaves_bounded_audit_rows_and_is_answered_429(
    live_server: Any, settings: Any
) -> None:
    settings.SYNC_PUSH_MAX_REQUESTS_PER_MINUTE_PER_IP = 300
    settings.SYNC_PUSH_AUDITED_REFUSALS_PER_MINUTE_PER_IP = 20
    counters = [(p, r) for p in ("google", "microsoft") for r in ("rate_limited", "over_audit_budget")]
    before = {key: unaudited(*key) for key in counters}
    google_forged = {
        "X-Goog-Channel-ID": "made-up-channel",
        "X-Goog-Channel-Token": "guess",
        "X-Goog-Resource-ID": "made-up-resource",
        "X-Goog-Resource-State": "exists",
    }
    graph_forged = graph_delivery({"subscriptionId": "made-up", "clientState": "guess"})

    def forge(n: int) -> tuple[str, int]:
        if n % 3 == 0:
            return "google", client.post("/hooks/google", headers=google_forged).status_code
        path = "/hooks/microsoft" if n % 3 == 1 else "/hooks/microsoft/lifecycle"
        return "microsoft", client.post(path, content=graph_forged).status_code

    started = time.monotonic()
    with (
        http_client(live_server.url, headers={"Connection": "close"}) as client,
        ThreadPoolExecutor(max_workers=4) as pool,
    ):
        answers = list(pool.map(forge, range(600)))
    elapsed = time.monotonic() - started

    statuses = Counter(status for _, status in answers)
    assert set(statuses) == {404, 429}
    # Each bucket refills smoothly: at most its capacity and what came back while the flood lasted.
    assert 300 <= statuses[404] <= 300 + elapsed * 300 / 60 + 1
    rows = audit_rows(event_type="sync.push.rejected")
    assert 20 <= len(rows) <= 20 + elapsed * 20 / 60 + 1, f"{len(rows)} rows in {elapsed:.1f} s"
    assert {row.details["peer_ip"] for row in rows} == {"127.0.0.1"}
    counted = {key: unaudited(*key) - before[key] for key in counters}
    assert sum(counted[(p, "rate_limited")] for p in ("google", "microsoft")) == statuses[429]
    assert sum(counted[(p, "over_audit_budget")] for p in ("google", "microsoft")) == statuses[404] - len(
        rows
    )
    assert all(counted[key] > 0 for key in counters), counted
