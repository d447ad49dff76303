"""Mail by the signed inbound webhook, over real HTTP to the live server: a message signed with the
workspace's secret is stored once, parsed and announced like SMTP mail; a request that is unsigned,
stale, replayed, oversize, or for nobody here is refused with a problem and stores nothing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.db import connection, transaction
from prometheus_client import REGISTRY

from agentcal.ids import new_public_id
from audit.models import AuditRecord
from inboxes.mail_settings import inbound_webhook_secret_issue
from inboxes.models import InboundRaw, InboundWebhookDelivery, Message
from inboxes.services import inbound_parse
from tests.helpers import Persona, http_client
from tests.inboxes.helpers import address_of, mail
from tests.webhooks.helpers import wait_until
from webhooks.models import OutboxEvent
from workspaces.models import Agent, Workspace

Post = Callable[..., httpx.Response]


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks v1, written out: HMAC-SHA256 over "{id}.{timestamp}.{body}", keyed with the
    base64-decoded part of the secret after `whsec_`."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


@pytest.fixture
def hooks(live_server: Any) -> Iterator[httpx.Client]:
    with http_client(f"{live_server.url}/hooks", headers={"Connection": "close"}) as client:
        yield client


@pytest.fixture
def acme_secret(sdr: Persona) -> str:
    return inbound_webhook_secret_issue(workspace=sdr.agent.workspace, actor=None, by="test")


@pytest.fixture
def post(hooks: httpx.Client, sdr: Persona, acme_secret: str) -> Post:
    """POST a raw message to acme's inbound webhook, signed with acme's secret unless told otherwise."""

    def send(
        body: bytes,
        *,
        workspace: Workspace | None = None,
        secret: str | None = None,
        msg_id: str | None = None,
        timestamp: int | None = None,
        content_type: str = "message/rfc822",
        **headers: str,
    ) -> httpx.Response:
        workspace_id = (workspace or sdr.agent.workspace).public_id
        msg_id = msg_id or new_public_id("msg")
        timestamp = int(time.time()) if timestamp is None else timestamp
        signed = {
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(secret or acme_secret, msg_id, timestamp, body),
            "content-type": content_type,
            **{name.replace("_", "-"): value for name, value in headers.items()},
        }
        return hooks.post(f"/inbound-mail/{workspace_id}", content=body, headers=signed)

    return send


def problem(response: httpx.Response, status: int, error: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["error"] == error and body["status"] == status
    return body


def rejections() -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(event_type="inbox.webhook.rejected").order_by("id"))


# --- Accepted -----------------------------------------------------------------------------------------------


def test_a_signed_message_is_stored_parsed_by_the_worker_and_announced(sdr, post, celery_worker):
    address = address_of(sdr)
    raw = bytes(mail(address, Cc="Bo <bo@example.org>", message_id="hook@example.com"))

    response = post(raw)

    assert response.status_code == 202, response.text
    answer = response.json()
    # Bo is another person's copy, not a recipient here; only the agent's address counts.
    assert answer == {"id": answer["id"], "recipients": [address], "refused": []}
    assert answer["id"].startswith("inm_")
    stored = InboundRaw.objects.get()  # committed before the 202
    assert bytes(stored.raw) == raw and stored.envelope_to == [address]
    assert stored.envelope_from == "ana@example.com" and stored.peer_ip == "127.0.0.1"
    message = wait_until(lambda: Message.objects.filter(agent=sdr.agent).first(), timeout=10)
    assert message.message_id == "hook@example.com" and message.untrusted is True
    event = wait_until(lambda: OutboxEvent.objects.filter(event_type="message.received").first())
    assert event.agent_id == sdr.agent.pk and event.payload["message"]["id"] == message.public_id


def test_delivered_to_names_the_recipients_and_the_refused_ones_are_audited(
    sdr, exec_assistant, outsider, post
):
    """Providers write the envelope recipient into Delivered-To: a Bcc'd agent is reached, and the To
    and Cc (here another agent) are other people's copies, not recipients of this delivery."""
    message = mail(f"Other <{address_of(exec_assistant)}>", Cc="Bo <bo@example.org>")
    for address in (address_of(sdr), "ghost@acme.agentcal.localhost", address_of(outsider)):
        message["Delivered-To"] = address

    response = post(bytes(message))

    assert response.status_code == 202, response.text
    # The outsider's address is not at acme's domains, so it is not acme's recipient at all.
    assert response.json()["recipients"] == [address_of(sdr)]
    assert response.json()["refused"] == ["ghost@acme.agentcal.localhost"]
    (delivered,) = inbound_parse(InboundRaw.objects.get().pk)
    assert delivered.agent_id == sdr.agent.pk
    refused = AuditRecord.objects.get(event_type="inbox.message.refused")
    assert refused.failure_reason == "unknown_recipient"
    assert refused.details["recipient"] == "ghost@acme.agentcal.localhost"
    assert refused.workspace_id == sdr.agent.workspace_id


def test_x_original_to_names_the_recipient_when_there_is_no_delivered_to(sdr, exec_assistant, post):
    message = mail(address_of(exec_assistant), X_Original_To=address_of(sdr))

    response = post(bytes(message))

    assert response.status_code == 202, response.text
    assert response.json()["recipients"] == [address_of(sdr)]


def test_without_envelope_headers_the_to_and_cc_at_this_workspace_are_the_recipients(
    sdr, exec_assistant, outsider, post
):
    message = mail(f"{address_of(sdr)}, {address_of(outsider)}", Cc=address_of(exec_assistant))

    response = post(bytes(message))

    assert response.status_code == 202, response.text
    assert response.json()["recipients"] == [address_of(sdr), address_of(exec_assistant)]
    assert response.json()["refused"] == []


def test_a_request_header_cannot_send_a_signed_message_to_another_agent(sdr, exec_assistant, post):
    """The headers of the request are not signed: whoever can change a request in transit (or replays a
    captured one) must not be able to choose its recipient. Only the signed message names it."""
    raw = bytes(mail(address_of(sdr)))

    redirected = post(
        raw, msg_id="msg_redirected", Delivered_To=address_of(exec_assistant), To=address_of(exec_assistant)
    )

    assert redirected.status_code == 202, redirected.text
    assert redirected.json()["recipients"] == [address_of(sdr)]
    assert not Message.objects.filter(agent=exec_assistant.agent).exists()


def test_a_retried_webhook_id_is_answered_the_same_and_stored_once(sdr, post):
    raw = bytes(mail(address_of(sdr)))
    first = post(raw, msg_id="msg_retried")
    again = post(raw, msg_id="msg_retried")

    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == first.json()
    assert InboundRaw.objects.count() == 1 == InboundWebhookDelivery.objects.count()


@pytest.mark.concurrency
def test_a_copy_racing_an_uncommitted_first_one_waits_and_answers_with_its_result(sdr, post):
    """The copy finds no earlier delivery (the first is not committed yet), stores the message, and
    waits on the unique webhook id; when the first commits, its own write is rolled back and it answers
    with the first one's result."""
    raw = bytes(mail(address_of(sdr)))
    first_inserted, first_may_commit = threading.Event(), threading.Event()

    def first_copy() -> None:
        with transaction.atomic():
            row = InboundRaw.objects.create(raw=raw, envelope_from="", envelope_to=[address_of(sdr)])
            InboundWebhookDelivery.objects.create(
                workspace=sdr.agent.workspace, webhook_id="msg_raced", raw=row, recipients=[address_of(sdr)]
            )
            first_inserted.set()
            first_may_commit.wait(10)
        connection.close()

    first = threading.Thread(target=first_copy)
    first.start()
    first_inserted.wait(10)
    answers: list[httpx.Response] = []
    second = threading.Thread(target=lambda: answers.append(post(raw, msg_id="msg_raced")))
    second.start()
    wait_until(lambda: waiting_on_a_lock() > 0, timeout=10)
    first_may_commit.set()
    first.join()
    second.join()

    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "id": InboundWebhookDelivery.objects.get().public_id,
        "recipients": [address_of(sdr)],
        "refused": [],
    }
    assert InboundRaw.objects.count() == 1


def waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        (count,) = cursor.fetchone()
    return int(count)


# --- Refused ------------------------------------------------------------------------------------------------


def test_a_bad_signature_is_refused_audited_and_nothing_stored(sdr, post, hooks, acme_secret):
    raw = bytes(mail(address_of(sdr)))
    msg_id, timestamp = "msg_forged", int(time.time())
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(acme_secret, msg_id, timestamp, raw + b"tampered"),
        "content-type": "message/rfc822",
    }

    tampered = hooks.post(f"/inbound-mail/{sdr.agent.workspace.public_id}", content=raw, headers=headers)
    unsigned = hooks.post(
        f"/inbound-mail/{sdr.agent.workspace.public_id}",
        content=raw,
        headers={"content-type": "message/rfc822"},
    )

    problem(tampered, 401, "invalid_signature")
    problem(unsigned, 401, "invalid_signature")
    assert not InboundRaw.objects.exists()
    audited = rejections()
    assert [row.failure_reason for row in audited] == ["invalid_signature"] * 2
    assert audited[0].workspace_id == sdr.agent.workspace_id and audited[0].http_status == 401
    assert audited[0].details["webhook_id"] == "msg_forged"


def test_another_workspaces_secret_or_an_unknown_workspace_gets_the_same_401(sdr, outsider, post):
    raw = bytes(mail(address_of(sdr)))
    globex = outsider.agent.workspace
    globex_secret = inbound_webhook_secret_issue(workspace=globex, actor=None, by="test")

    wrong_secret = post(raw, secret=globex_secret)
    no_such_workspace = post(raw, workspace=Workspace(public_id="ws_nosuchworkspace"))
    not_an_id = post(raw, workspace=Workspace(public_id="Not-An-Id"))
    without_secret = post(raw, workspace=Workspace.objects.create(slug="initech", name="Initech"))

    answers = (wrong_secret, no_such_workspace, not_an_id, without_secret)
    bodies = [problem(response, 401, "invalid_signature") for response in answers]
    # Nothing tells a workspace that exists from one that does not.
    assert all(body == bodies[0] for body in bodies)
    assert not InboundRaw.objects.exists()


def test_a_stale_or_future_timestamp_is_refused(sdr, post):
    raw = bytes(mail(address_of(sdr)))
    stale = post(raw, timestamp=int(time.time()) - 6 * 60)
    future = post(raw, timestamp=int(time.time()) + 6 * 60)
    just_in_time = post(raw, timestamp=int(time.time()) - 4 * 60)

    assert "from the server's clock" in problem(stale, 401, "stale_timestamp")["detail"]
    problem(future, 401, "stale_timestamp")
    assert just_in_time.status_code == 202
    assert InboundRaw.objects.count() == 1


def test_a_message_for_nobody_here_is_422_and_the_refusal_audited(sdr, post):
    for_a_ghost = post(bytes(mail("ghost@acme.agentcal.localhost")))
    for_strangers_only = post(bytes(mail("someone@example.com")))

    body = problem(for_a_ghost, 422, "unknown_recipient")
    assert body["refused"] == ["ghost@acme.agentcal.localhost"]
    assert body["reasons"] == {"ghost@acme.agentcal.localhost": "unknown_recipient"}
    problem(for_strangers_only, 422, "unknown_recipient")
    assert not InboundRaw.objects.exists()
    refused = AuditRecord.objects.get(event_type="inbox.message.refused")
    assert refused.failure_reason == "unknown_recipient"
    assert refused.workspace_id == sdr.agent.workspace_id
    assert [row.failure_reason for row in rejections()] == ["unknown_recipient"]


def test_a_full_inbox_defers_the_message_so_the_sender_retries(sdr, post):
    Agent.objects.filter(pk=sdr.agent.pk).update(inbox_storage_limit_bytes=0)

    response = post(bytes(mail(address_of(sdr))))

    body = problem(response, 503, "recipients_deferred")
    assert body["reasons"] == {address_of(sdr): "mailbox_full"}
    assert response.headers["retry-after"] == "300"
    assert not InboundRaw.objects.exists()
    assert AuditRecord.objects.get(event_type="inbox.message.refused").failure_reason == "mailbox_full"


def test_an_oversize_message_is_413_and_an_empty_or_mistyped_body_is_refused(sdr, post, settings):
    settings.INBOUND_MAX_MESSAGE_BYTES = 2048

    oversize = post(bytes(mail(address_of(sdr), body="x" * 5000 + "\n")))
    empty = post(b"")
    as_json = post(b'{"to": "sdr"}', content_type="application/json")
    as_octets = post(bytes(mail(address_of(sdr))), content_type="application/octet-stream")

    assert problem(oversize, 413, "payload_too_large")["max_bytes"] == 2048
    problem(empty, 400, "empty_message")
    problem(as_json, 415, "unsupported_media_type")
    assert as_octets.status_code == 202
    assert InboundRaw.objects.count() == 1


def test_a_huge_declared_length_is_refused_without_waiting_for_the_body(sdr, live_server, settings):
    """The server answers from Content-Length alone: were it reading the promised gigabyte, it would
    wait for bytes that never come and the client would time out."""
    settings.INBOUND_MAX_MESSAGE_BYTES = 2048
    url = urlsplit(live_server.url)
    request = (
        f"POST /hooks/inbound-mail/{sdr.agent.workspace.public_id} HTTP/1.1\r\n"
        f"Host: {url.netloc}\r\nContent-Type: message/rfc822\r\nContent-Length: 1000000000\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + b"From: a@example.com\r\n"
    with socket.create_connection((url.hostname, url.port), timeout=5) as connection:
        connection.sendall(request)
        answer = connection.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_a_workspace_over_its_rate_is_told_when_to_retry(sdr, post, settings):
    settings.INBOUND_WEBHOOK_MAX_MESSAGES_PER_MINUTE = 2
    raw = bytes(mail(address_of(sdr)))
    accepted = [post(raw).status_code for _ in range(2)]
    limited = post(raw)

    assert accepted == [202, 202]
    problem(limited, 429, "rate_limited")
    assert limited.headers["retry-after"] == "30"
    assert InboundRaw.objects.count() == 2


# --- Floods from anyone -------------------------------------------------------------------------------------


def unaudited(reason: str) -> float:
    """The live server runs in this process: its counters are this process's."""
    value = REGISTRY.get_sample_value("agentcal_inbound_webhook_unaudited_refusals_total", {"reason": reason})
    return value or 0.0


def test_a_peer_over_its_rate_is_refused_before_the_signature_and_not_audited(
    sdr, outsider, post, hooks, settings
):
    """Without the secret nobody can fill the audit log: past the peer's budget for the workspace, requests
    are refused unread (signed or not) and only counted."""
    settings.INBOUND_WEBHOOK_MAX_REQUESTS_PER_MINUTE_PER_IP = 3
    raw = bytes(mail(address_of(sdr)))
    url = f"/inbound-mail/{sdr.agent.workspace.public_id}"
    limited_before = unaudited("rate_limited")

    answers = [
        hooks.post(url, content=raw, headers={"content-type": "message/rfc822"}).status_code for _ in range(5)
    ]
    signed = post(raw)

    assert answers == [401, 401, 401, 429, 429]
    assert problem(signed, 429, "rate_limited")["title"].startswith("Too many requests from this address")
    assert signed.headers["retry-after"] == "20"
    assert not InboundRaw.objects.exists()
    assert [row.failure_reason for row in rejections()] == ["invalid_signature"] * 3
    assert unaudited("rate_limited") - limited_before == 3
    # The budget is per workspace: another one's webhook still answers this peer.
    globex = outsider.agent.workspace
    other = hooks.post(
        f"/inbound-mail/{globex.public_id}", content=raw, headers={"content-type": "message/rfc822"}
    )
    assert other.status_code == 401


def test_refusals_past_a_peers_audit_budget_are_counted_not_audited(sdr, post, settings):
    """Made-up workspace ids each get a request budget of their own, so the audited refusals have one per
    peer, whatever the id: spent alike by a real workspace and a made-up one, which also take the same
    time (both write a row, or neither)."""
    settings.INBOUND_WEBHOOK_AUDITED_REFUSALS_PER_MINUTE_PER_IP = 2
    raw = bytes(mail(address_of(sdr)))
    before = unaudited("over_audit_budget")

    made_up = [post(raw, workspace=Workspace(public_id=new_public_id("ws"))) for _ in range(3)]
    real = post(raw, secret="whsec_" + "A" * 44)

    assert [answer.status_code for answer in [*made_up, real]] == [401] * 4
    assert [row.workspace_id for row in rejections()] == [None, None]
    assert unaudited("over_audit_budget") - before == 2
    assert post(raw).status_code == 202  # a signed request is not held back by others' refusals


def test_refusals_under_made_up_workspace_ids_are_bounded_per_address(sdr, post, settings):
    """Each workspace id as written has its own request budget, so a peer naming a new made-up id every time
    would never meet one: its refusals together are bounded per address, and past them it is refused
    unread, signed or not, until the budget refills."""
    settings.INBOUND_WEBHOOK_MAX_REFUSALS_PER_MINUTE_PER_IP = 3
    raw = bytes(mail(address_of(sdr)))

    made_up = [post(raw, workspace=Workspace(public_id=new_public_id("ws"))).status_code for _ in range(5)]
    signed = post(raw)

    assert made_up == [401, 401, 401, 429, 429]
    assert (
        problem(signed, 429, "rate_limited")["detail"]
        == "Over 3 refused requests a minute from this address."
    )
    assert len(rejections()) == 3
    assert not InboundRaw.objects.exists()


def test_a_delivery_report_through_the_webhook_keeps_its_null_return_path(sdr, post):
    """A provider relays a bounce with `Return-Path: <>`: it is recorded as the null sender (as SMTP's
    `MAIL FROM:<>`), so the report can fail the agent's sent message."""
    raw = b"Return-Path: <>\r\n" + bytes(mail(address_of(sdr), sender="MAILER-DAEMON@mx.example.com"))
    assert post(raw).status_code == 202
    assert InboundRaw.objects.get().envelope_from == "<>"
