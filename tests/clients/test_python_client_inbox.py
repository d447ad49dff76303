"""The Python client's inbox and approvals against the real server: real stored mail parsed into the
models, sends queued or refused by quota, and waiting for a person's decision."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from agentcal_client import AgentCal, ApprovalWaitTimeout, QuotaExceeded
from django.db import connection

from approvals.services import approval_decide
from tests.helpers import Persona
from tests.inboxes.helpers import address_of, deliver_raw, mail

pytestmark = pytest.mark.django_db(transaction=True)

MakeClient = Callable[..., AgentCal]


def test_the_client_reads_a_received_message_and_replies(sdr: Persona, agentcal_for: MakeClient) -> None:
    message = mail(address_of(sdr), subject="Meeting next week?", message_id="a@example.com")
    message.add_attachment(b"agenda", maintype="text", subtype="plain", filename="agenda.txt")
    (stored,) = deliver_raw(message.as_bytes(), [address_of(sdr)])
    client = agentcal_for(sdr)

    inbox = client.inbox.get()
    (thread,) = client.inbox.threads()
    detail = client.inbox.thread(thread.id)
    (listed,) = client.inbox.messages(thread=thread.id)
    shown = client.inbox.message(stored.public_id)

    assert inbox.address == address_of(sdr) and inbox.quota.sent_today == 0
    assert thread.subject == "Meeting next week?" and thread.unread == 1
    assert [m.id for m in detail.messages] == [listed.id] == [shown.id] == [stored.public_id]
    assert shown.from_ is not None and shown.from_.address == "ana@example.com"
    assert shown.untrusted is True and shown.received_at.tzinfo is not None
    (attachment,) = shown.attachments
    assert client.inbox.attachment(shown.id, attachment.id) == b"agenda"
    assert b"Subject: Meeting next week?" in client.inbox.raw(shown.id)

    queued = client.inbox.reply(shown.id, "Tuesday at 10 works.")
    assert queued.status == "queued" and queued.id.startswith("msg_")


def test_a_send_over_the_daily_quota_raises_quota_exceeded_without_retrying(
    sdr: Persona, agentcal_for: MakeClient
) -> None:
    sdr.agent.inbox_daily_send_limit = 0
    sdr.agent.save(update_fields=["inbox_daily_send_limit"])
    client = agentcal_for(sdr, max_retries=3)

    started = time.monotonic()
    with pytest.raises(QuotaExceeded) as caught:
        client.inbox.send(["ana@example.com"], "Hello", "Hi Ana")

    assert caught.value.status == 429 and caught.value.quota == "daily_sends"
    assert caught.value.retry_after is None, "waiting cannot help with a limit of 0"
    assert time.monotonic() - started < 1.0
    with pytest.raises(TypeError):  # a str is a Sequence[str] to mypy: caught at run time
        client.inbox.send("ana@example.com", "Hello", "Hi Ana")


def test_waiting_for_an_approval_returns_the_decision_or_times_out(
    sdr: Persona, owner: Any, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    approval = client.approvals.request("Book the intro call", {"why": "asked by Ana"}, state={"step": 2})
    assert approval.pending and approval.state == {"step": 2}

    with pytest.raises(ApprovalWaitTimeout) as timed_out:
        client.approvals.wait(approval.id, timeout=0.3, poll_interval=0.1)
    assert timed_out.value.approval.pending

    def decide() -> None:  # a person in the dashboard, a moment later
        time.sleep(0.3)
        try:
            approval_decide(approval_id=approval.id, workspace=sdr.agent.workspace, user=owner, approve=True)
        finally:
            connection.close()  # this thread's own connection

    person = threading.Thread(target=decide)
    person.start()
    decided = client.approvals.wait(approval.id, timeout=10, poll_interval=0.1)
    person.join()

    assert decided.status == "approved" and decided.decided_at is not None
    assert decided.decided_by == owner.email
