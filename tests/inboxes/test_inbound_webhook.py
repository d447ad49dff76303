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

from agentcal.ids import new_public_id
from audit.models import AuditRecord
from inboxes.mail_settings import inbound_webhook_secret_issue
from inboxes.models import InboundRaw, InboundWebhookDelivery, Message
from inboxes.services import inbound_parse
from tests.conftest import Persona, http_client
from tests.inboxes.conftest import address_of, mail
from tests.webhooks.conftest import wait_until
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


def test_the_envelope_header_names_the_recipients_and_the_refused_ones_are_audited(
    sdr, exec_assistant, outsider, post
):
    envelope = ", ".join(
        [address_of(sdr), "ghost@acme.agentcal.localhost", address_of(outsider), address_of(exec_assistant)]
    )

    response = post(bytes(mail("undisclosed-recipients:;")), AgentCal_Envelope_To=envelope)

    assert response.status_code == 202, response.text
    assert response.json()["recipients"] == [address_of(sdr), address_of(exec_assistant)]
    assert response.json()["refused"] == sorted(["ghost@acme.agentcal.localhost", address_of(outsider)])
    messages = inbound_parse(InboundRaw.objects.get().pk)
    assert {m.agent_id for m in messages} == {sdr.agent.pk, exec_assistant.agent.pk}
    refusals = {
        row.details["recipient"]: row
        for row in AuditRecord.objects.filter(event_type="inbox.message.refused")
    }
    assert refusals["ghost@acme.agentcal.localhost"].failure_reason == "unknown_recipient"
    # Another workspace's agent: acme's secret may not deliver into globex's inboxes.
    assert refusals[address_of(outsider)].failure_reason == "relay_denied"
    assert {row.workspace_id for row in refusals.values()} == {sdr.agent.workspace_id}


def test_a_retried_webhook_id_is_answered_the_same_and_stored_once(sdr, post):
    raw = bytes(mail(address_of(sdr)))
    first = post(raw, msg_id="msg_retried")
    again = post(raw, msg_id="msg_retried")

    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == first.json()
    assert InboundRaw.objects.count() == 1 == InboundWebhookDelivery.objects.count()


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
