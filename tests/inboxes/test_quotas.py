"""Per-agent send quotas over real HTTP: exact under concurrency, honest Retry-After, rolling windows,
distinct recipients, and one agent's exhaustion leaving the others alone."""

from __future__ import annotations

import smtplib
import threading
import time
from datetime import timedelta

import httpx
import pytest
from django.db.models import F

from inboxes.models import Direction, InboundRaw, Message, MessageStatus
from inboxes.services import inbound_parse
from tests.dashboard.pages_helpers import make_team, signed_in, text
from tests.helpers import audit_rows
from tests.inboxes.helpers import address_of, deliver_raw, mail


def send(client: httpx.Client, *to: str, cc: tuple[str, ...] = ()) -> httpx.Response:
    return client.post(
        "/inbox/send",
        json={"to": list(to or ("ana@example.com",)), "cc": list(cc), "subject": "Hello", "text": "Hi."},
    )


def refused(response: httpx.Response, quota: str) -> dict:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["error"] == "quota_exceeded" and body["quota"] == quota, body
    return body


def outbound_count(persona) -> int:
    return Message.objects.filter(agent=persona.agent, direction=Direction.OUTBOUND).count()


def set_limits(persona, **limits: int | None) -> None:
    for name, value in limits.items():
        setattr(persona.agent, f"inbox_{name}", value)
    persona.agent.save(update_fields=[f"inbox_{name}" for name in limits])


@pytest.mark.concurrency
def test_twenty_concurrent_sends_admit_exactly_the_burst_limit(sdr):
    set_limits(sdr, burst_limit=5)
    barrier = threading.Barrier(20)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def racer(n: int) -> None:
        with sdr.new_client() as client:
            barrier.wait()
            response = send(client, f"person{n}@example.com")
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [202] * 5 + [429] * 15
    for response in responses:
        if response.status_code == 429:
            body = refused(response, "burst")
            assert body["limit"] == 5 and body["window_seconds"] == 60
            # The oldest of the five leaves the 60-second window within a minute of now.
            assert 0 < body["retry_after"] <= 60
            assert response.headers["Retry-After"] == str(body["retry_after"])
    assert outbound_count(sdr) == 5
    rejected = audit_rows(event_type="inbox.message.rejected")
    assert len(rejected) == 15
    assert {r.failure_reason for r in rejected} == {"quota_exceeded"}
    assert {r.agent_public_id for r in rejected} == {sdr.id}
    assert {(r.http_status, r.details["quota"], r.details["limit"]) for r in rejected} == {(429, "burst", 5)}
    assert len(audit_rows(event_type="inbox.message.queued")) == 5


def test_retry_after_is_when_the_send_fits_again(sdr, settings):
    settings.INBOX_BURST_WINDOW_SECONDS = 1
    set_limits(sdr, burst_limit=2)
    assert send(sdr.client).status_code == 202
    assert send(sdr.client).status_code == 202
    body = refused(send(sdr.client), "burst")
    assert body["retry_after"] == 1

    time.sleep(body["retry_after"] + 0.05)
    assert send(sdr.client).status_code == 202


def test_the_daily_limit_is_a_rolling_24_hours(sdr):
    set_limits(sdr, burst_limit=100, daily_send_limit=3)
    for _ in range(3):
        assert send(sdr.client).status_code == 202
    body = refused(send(sdr.client), "daily_sends")
    assert body["limit"] == 3 and body["window_seconds"] == 86400
    assert 86390 < body["retry_after"] <= 86400

    # The oldest send made 23 h 59 min 30 s ago leaves the window in 30 seconds: that is Retry-After.
    oldest = Message.objects.filter(agent=sdr.agent).earliest("received_at")
    Message.objects.filter(pk=oldest.pk).update(
        received_at=F("received_at") - timedelta(hours=23, minutes=59, seconds=30)
    )
    body = refused(send(sdr.client), "daily_sends")
    assert 25 <= body["retry_after"] <= 30

    # Once it is older than 24 hours it no longer counts.
    Message.objects.filter(pk=oldest.pk).update(received_at=F("received_at") - timedelta(minutes=1))
    assert send(sdr.client).status_code == 202
    assert outbound_count(sdr) == 4


def test_distinct_recipients_per_day_are_limited_case_insensitively(sdr):
    set_limits(sdr, daily_recipient_limit=3)
    assert send(sdr.client, "a@example.com", cc=("b@example.com",)).status_code == 202
    body = refused(send(sdr.client, "c@example.com", cc=("d@example.com",)), "daily_recipients")
    assert body["limit"] == 3 and 86390 < body["retry_after"] <= 86400
    # Writing again to someone already counted takes no new share.
    assert send(sdr.client, "A@Example.com", cc=("c@example.com",)).status_code == 202
    assert send(sdr.client, "b@example.com").status_code == 202
    refused(send(sdr.client, "e@example.com"), "daily_recipients")

    # One message naming more addresses than the whole daily limit can never fit: no Retry-After.
    set_limits(sdr, daily_recipient_limit=2)
    Message.objects.filter(agent=sdr.agent).update(received_at=F("received_at") - timedelta(days=2))
    response = send(sdr.client, "x@example.com", "y@example.com", "z@example.com")
    assert refused(response, "daily_recipients")["retry_after"] is None
    assert "Retry-After" not in response.headers
    assert outbound_count(sdr) == 3


def test_a_limit_of_zero_switches_sending_off(sdr):
    set_limits(sdr, daily_send_limit=0)
    response = send(sdr.client)
    assert refused(response, "daily_sends")["retry_after"] is None
    assert "Retry-After" not in response.headers


def test_replies_count_against_the_same_quota(sdr):
    set_limits(sdr, burst_limit=1)
    (parent,) = deliver_raw(mail(address_of(sdr)).as_bytes(), [address_of(sdr)])
    assert send(sdr.client).status_code == 202
    response = sdr.client.post(f"/inbox/messages/{parent.public_id}/reply", json={"text": "Yes."})
    refused(response, "burst")
    assert response.headers["Retry-After"]


def test_one_agent_exhausting_its_quota_leaves_the_others_sending(sdr, exec_assistant):
    set_limits(sdr, burst_limit=1)
    assert send(sdr.client).status_code == 202
    refused(send(sdr.client), "burst")
    assert send(exec_assistant.client).status_code == 202
    assert send(exec_assistant.client).status_code == 202


def test_discarded_drafts_do_not_count(sdr):
    set_limits(sdr, burst_limit=1)
    assert send(sdr.client).status_code == 202
    refused(send(sdr.client), "burst")
    Message.objects.filter(agent=sdr.agent).update(status=MessageStatus.DISCARDED)
    assert send(sdr.client).status_code == 202


def test_the_inbox_reports_every_limit_and_its_use(sdr, exec_assistant, settings):
    set_limits(sdr, burst_limit=7, daily_recipient_limit=40)
    assert send(sdr.client, "a@example.com", cc=("B@example.com",)).status_code == 202
    assert send(sdr.client, "b@example.com").status_code == 202
    (received,) = deliver_raw(mail(address_of(sdr)).as_bytes(), [address_of(sdr)])
    # Another agent's mail is not this one's storage.
    deliver_raw(mail(address_of(exec_assistant)).as_bytes(), [address_of(exec_assistant)])

    response = sdr.client.get("/inbox")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "address": address_of(sdr),
        "review_first": False,
        "quota": {
            "burst_limit": 7,
            "burst_window_seconds": settings.INBOX_BURST_WINDOW_SECONDS,
            "sent_in_burst_window": 2,
            "daily_limit": settings.INBOX_DAILY_SEND_LIMIT,
            "daily_window_seconds": 86400,
            "sent_today": 2,
            "daily_recipient_limit": 40,
            "recipients_today": 2,
            "storage_limit_bytes": settings.INBOX_STORAGE_LIMIT_BYTES,
            "storage_used_bytes": received.size,
        },
    }
    assert received.size > 0


@pytest.mark.parametrize("path", ["/inbox/send", "/inbox/messages/{msg}/reply"])
def test_the_schema_documents_429_on_sending(anonymous, path):
    schema = anonymous.get("/schema", headers={"Accept": "application/json"}).json()
    operation = schema["paths"][f"/v1{path}".replace("{msg}", "{message_id}")]["post"]
    assert "application/problem+json" in operation["responses"]["429"]["content"]


def test_a_full_mailbox_refuses_new_mail_at_rcpt_with_452(sdr, exec_assistant, smtp_port):
    def smtp_send(*recipients: str) -> dict:
        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as client:
            return client.send_message(
                mail(recipients[0]), from_addr="ana@example.com", to_addrs=list(recipients)
            )

    assert smtp_send(address_of(sdr)) == {}
    (first,) = inbound_parse(InboundRaw.objects.get().pk)
    set_limits(sdr, storage_limit_bytes=first.size + 10)
    assert smtp_send(address_of(sdr)) == {}  # under the limit still: accepted, and now over it
    inbound_parse(InboundRaw.objects.latest("pk").pk)

    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        smtp_send(address_of(sdr))
    ((code, reply),) = refused.value.recipients.values()
    assert (code, reply) == (452, b"4.2.2 Mailbox full")
    # The other recipient of the same message is not held back by this one's full mailbox.
    assert smtp_send(address_of(sdr), address_of(exec_assistant)) == {
        address_of(sdr): (452, b"4.2.2 Mailbox full")
    }
    assert InboundRaw.objects.latest("pk").envelope_to == [address_of(exec_assistant)]
    rows = audit_rows(event_type="inbox.message.refused")
    assert [(r.failure_reason, r.details["recipient"]) for r in rows] == [
        ("mailbox_full", address_of(sdr))
    ] * 2
    assert sdr.client.get("/inbox").json()["quota"]["storage_used_bytes"] > first.size + 10

    # Room again (a larger limit): accepted.
    set_limits(sdr, storage_limit_bytes=None)
    assert smtp_send(address_of(sdr)) == {}


# --- Dashboard: owners and admins set review first and the limits ----------------------------------------


@pytest.fixture
def team(db, django_user_model):
    return make_team(django_user_model)


def inbox_settings_url(agent) -> str:
    return f"/w/acme/agents/{agent.public_id}/inbox-settings"


def test_an_admin_sets_review_first_and_limits_and_it_is_audited(team):
    admin = signed_in(team.admin, enforce_csrf_checks=True)
    page = text(admin.get(f"/w/acme/agents/{team.sdr.public_id}"))
    assert 'data-testid="inbox-settings"' in page and "default 10" in page
    token = admin.cookies["csrftoken"].value

    form = {"review_first": "on", "burst_limit": "3", "daily_send_limit": "", "storage_limit_mib": "5"}
    response = admin.post(inbox_settings_url(team.sdr), {**form, "csrfmiddlewaretoken": token})

    assert response.status_code == 302
    team.sdr.refresh_from_db()
    assert team.sdr.inbox_review_first is True and team.sdr.inbox_burst_limit == 3
    assert team.sdr.inbox_daily_send_limit is None and team.sdr.inbox_storage_limit_bytes == 5 * 1024 * 1024
    (row,) = audit_rows(event_type="agent.updated")
    assert row.actor_user == "adam@acme.test"
    assert row.details == {
        "agent_id": team.sdr.public_id,
        "changes": {
            "inbox_review_first": [False, True],
            "inbox_burst_limit": [None, 3],
            "inbox_storage_limit_bytes": [None, 5 * 1024 * 1024],
        },
    }
    page = text(admin.get(f"/w/acme/agents/{team.sdr.public_id}"))
    assert "every send waits for approval" in page and 'value="3"' in page

    # Blank again: back to the default.
    admin.post(inbox_settings_url(team.sdr), {"burst_limit": "", "csrfmiddlewaretoken": token})
    team.sdr.refresh_from_db()
    assert team.sdr.inbox_burst_limit is None and team.sdr.inbox_review_first is False


def test_without_a_csrf_token_nothing_changes(team):
    response = signed_in(team.owner, enforce_csrf_checks=True).post(
        inbox_settings_url(team.sdr), {"review_first": "on"}
    )
    assert response.status_code == 403
    team.sdr.refresh_from_db()
    assert team.sdr.inbox_review_first is False


def test_members_may_not_change_inbox_settings(team):
    response = signed_in(team.member).post(inbox_settings_url(team.sdr), {"review_first": "on"})
    assert response.status_code == 403
    assert "inbox-settings" not in text(signed_in(team.member).get(f"/w/acme/agents/{team.sdr.public_id}"))
    team.sdr.refresh_from_db()
    assert team.sdr.inbox_review_first is False and not audit_rows(event_type="agent.updated")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"burst_limit": "-1"}, "Ensure this value is greater than or equal to 0."),
        ({"daily_send_limit": "lots"}, "Enter a whole number."),
        ({"daily_recipient_limit": str(2**31)}, "Ensure this value is less than or equal to 2147483647."),
    ],
)
def test_invalid_limits_are_shown_inline_and_nothing_changes(team, data, message):
    response = signed_in(team.owner).post(inbox_settings_url(team.sdr), {"review_first": "on", **data})
    assert response.status_code == 400
    html = text(response)
    assert message in html and 'aria-invalid="true"' in html
    team.sdr.refresh_from_db()
    assert team.sdr.inbox_review_first is False and not audit_rows(event_type="agent.updated")


def test_another_workspace_cannot_reach_the_agent(team):
    response = signed_in(team.outsider).post(inbox_settings_url(team.sdr), {"review_first": "on"})
    assert response.status_code == 404
