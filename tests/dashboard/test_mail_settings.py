"""Mail settings: members read the inbound domain, the MX record and the webhook URL; owners and admins
set the domain (a hostname of their own, unique, not under AgentCal's suffix, used once a TXT record
found by a real DNS server proves it) and generate or rotate the inbound webhook's secret, shown once.
Every change is audited with the person's email."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from base64 import b64encode
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.management import CommandError, call_command
from django.db.models.functions import Now
from django.test import Client

from audit.models import AuditRecord
from inboxes.addresses import resolve_recipient
from inboxes.mail_settings import inbound_webhook_secret
from tests.dashboard.pages_helpers import signed_in, tables_containing, text
from tests.inboxes.dns_server import dns_server  # noqa: F401 (fixture)
from workspaces.models import Workspace

MAIL = "/w/acme/settings/mail"
SECRET = "/w/acme/settings/mail/secret"
NEW_SECRET = re.compile(r'<code id="new-secret">(whsec_[A-Za-z0-9+/=]+)</code>')


def audit_rows(event_type: str) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(event_type=event_type).order_by("id"))


def acme() -> Workspace:
    return Workspace.objects.get(slug="acme")


def hook_status(workspace: Workspace, secret: str, to: str = "ghost@acme.agentcal.localhost") -> int:
    """What the inbound webhook answers to a message signed with `secret` (to a recipient that does not
    exist, so a verified request ends in 422 and stores nothing)."""
    body = f"From: ana@example.com\r\nTo: {to}\r\nSubject: hi\r\n\r\nhello\r\n".encode()
    msg_id, timestamp = "msg_dashboard", int(time.time())
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    response = Client().post(
        f"/hooks/inbound-mail/{workspace.public_id}",
        data=body,
        content_type="message/rfc822",
        headers={
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": "v1," + base64.b64encode(digest).decode(),
        },
    )
    return response.status_code


# --- Reading -----------------------------------------------------------------------------------------------


def test_members_see_the_domain_mx_record_and_webhook_url_without_forms(team, settings):
    settings.INBOUND_MX_HOST = "mx.agentcal.example"
    settings.INBOUND_WEBHOOK_BASE_URL = "https://agentcal.example"

    response = signed_in(team.member).get(MAIL)

    assert response.status_code == 200
    html = text(response)
    assert '<strong data-testid="domain">acme.agentcal.localhost</strong>' in html
    assert (
        '<code data-testid="mx-record">acme.agentcal.localhost. IN MX 10 mx.agentcal.example.</code>' in html
    )
    webhook_url = f"https://agentcal.example/hooks/inbound-mail/{team.workspace.public_id}"
    assert f'data-testid="webhook-url">{webhook_url}</code>' in html
    assert 'data-testid="secret-status">not set' in html
    assert "exec-assistant@acme.agentcal.localhost" in html  # an example address
    assert 'data-testid="domain-form"' not in html and 'data-testid="secret-form"' not in html
    assert 'href="/w/acme/settings/mail" class="active"' in html  # the nav link


def test_the_dkim_record_to_publish_is_shown_when_mail_is_signed(team, settings):
    assert "not DKIM-signed" in text(signed_in(team.member).get(MAIL))

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    settings.INBOX_DKIM_SELECTOR = "s2026"
    settings.INBOX_DKIM_PRIVATE_KEY = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    html = text(signed_in(team.member).get(MAIL))
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    record = (
        f's2026._domainkey.acme.agentcal.localhost. IN TXT "v=DKIM1; k=rsa; p={b64encode(public).decode()}"'
    )
    assert f'data-testid="dkim-record">{record}</code>' in html


def test_managers_get_the_forms_and_outsiders_get_404(team):
    html = text(signed_in(team.admin).get(MAIL))
    assert 'data-testid="domain-form"' in html and "Generate secret" in html
    assert signed_in(team.outsider).get(MAIL).status_code == 404


# --- The inbound domain ------------------------------------------------------------------------------------


VERIFY = {"action": "verify"}
TXT_RECORD = re.compile(
    r'data-testid="verification-record">_agentcal\.([a-z0-9.-]+)\. IN TXT "([^"]+)"</code>'
)


def test_an_owner_proves_a_domain_by_dns_and_agents_receive_mail_there(team, dns_server):  # noqa: F811
    owner = signed_in(team.owner)
    response = owner.post(MAIL, {"inbound_domain": " Mail.Acme.Test. "})

    assert response.status_code == 302 and response["Location"] == MAIL
    # Pending: nothing is received at it, nothing is signed as it, until it is proven.
    assert acme().inbound_domain == "" and acme().inbound_domain_pending == "mail.acme.test"
    assert resolve_recipient("sdr@mail.acme.test").foreign
    page = text(owner.get(MAIL))
    assert "Publish the TXT record shown for mail.acme.test, then press Verify." in page
    assert '<strong data-testid="domain">acme.agentcal.localhost</strong>' in page
    record = TXT_RECORD.search(page)
    assert record and record.group(1) == "mail.acme.test"
    assert record.group(2) == f"agentcal-verification={acme().inbound_domain_token}"
    assert 'data-testid="verify-form"' in page
    (requested,) = audit_rows("workspace.inbound_domain.requested")
    assert requested.actor_user == "olivia@acme.test"
    assert requested.details == {"domain": "mail.acme.test", "current": "acme.agentcal.localhost"}

    dns_server.publish("_agentcal.mail.acme.test", record.group(2))
    verified = owner.post(MAIL, VERIFY)

    assert verified.status_code == 302 and verified["Location"] == MAIL
    assert dns_server.queries == ["_agentcal.mail.acme.test"]
    assert acme().inbound_domain == "mail.acme.test" and acme().inbound_domain_verified_at is not None
    assert acme().inbound_domain_pending == ""
    assert resolve_recipient("sdr@mail.acme.test").agent == team.sdr
    assert resolve_recipient("sdr@acme.agentcal.localhost").agent == team.sdr  # the default still works
    (row,) = audit_rows("workspace.inbound_domain.verified")
    assert row.actor_user == "olivia@acme.test" and row.workspace_id == team.workspace.pk
    assert row.details == {"from": "acme.agentcal.localhost", "to": "mail.acme.test"}
    page = text(owner.get(MAIL))
    assert "mail.acme.test is verified: agents now receive mail at …@mail.acme.test." in page
    assert "mail.acme.test. IN MX 10" in page and 'data-testid="pending-domain"' not in page

    back = owner.post(MAIL, {"inbound_domain": "acme.agentcal.localhost"})
    assert back.status_code == 302 and acme().inbound_domain == ""  # its own default: at once, stored blank
    (updated,) = audit_rows("workspace.inbound_domain.updated")
    assert updated.details == {"from": "mail.acme.test", "to": "acme.agentcal.localhost"}


def test_a_record_with_another_token_or_none_at_all_is_a_form_error_and_audited(team, dns_server):  # noqa: F811
    admin = signed_in(team.admin)
    admin.post(MAIL, {"inbound_domain": "mail.acme.test"})
    dns_server.publish("_agentcal.mail.acme.test", "agentcal-verification=someone-elses-token")
    dns_server.publish("_agentcal.mail.acme.test", "v=spf1 -all")

    wrong = admin.post(MAIL, VERIFY)
    del dns_server.txt["_agentcal.mail.acme.test"]
    missing = admin.post(MAIL, VERIFY)

    assert wrong.status_code == 400
    assert 'data-testid="verify-error"' in text(wrong)
    assert "has no TXT record" in text(wrong) and "someone-elses-token" in text(wrong)
    assert 'data-testid="verify-form"' in text(wrong)  # to try again
    assert missing.status_code == 400 and "has no TXT record" in text(missing)
    assert acme().inbound_domain == "" and acme().inbound_domain_pending == "mail.acme.test"
    rows = audit_rows("workspace.inbound_domain.verify.rejected")
    assert [row.failure_reason for row in rows] == ["inbound_domain_unverified"] * 2
    assert rows[0].actor_user == "adam@acme.test" and rows[0].details["domain"] == "mail.acme.test"
    assert sorted(rows[0].details["found"]) == ["agentcal-verification=someone-elses-token", "v=spf1 -all"]
    assert rows[1].details["found"] == []
    assert audit_rows("workspace.inbound_domain.verified") == []


def test_a_dns_server_that_does_not_answer_is_a_form_error(team, dns_server, settings):  # noqa: F811
    admin = signed_in(team.admin)
    admin.post(MAIL, {"inbound_domain": "mail.acme.test"})
    dns_server.silent = True
    settings.INBOUND_DOMAIN_DNS_TIMEOUT_SECONDS = 0.3

    response = admin.post(MAIL, VERIFY)

    assert response.status_code == 400
    assert "_agentcal.mail.acme.test could not be looked up" in text(response)
    assert acme().inbound_domain == ""
    assert len(audit_rows("workspace.inbound_domain.verify.rejected")) == 1


def test_verify_without_a_pending_domain_is_a_clear_error(team):
    response = signed_in(team.owner).post(MAIL, VERIFY)

    assert response.status_code == 409
    assert "Enter the domain first" in text(response)


def test_a_verified_domain_keeps_receiving_while_the_next_one_waits_for_its_proof(team, dns_server):  # noqa: F811
    Workspace.objects.filter(pk=team.workspace.pk).update(
        inbound_domain="mail.acme.test", inbound_domain_verified_at=Now()
    )
    owner = signed_in(team.owner)

    owner.post(MAIL, {"inbound_domain": "agents.acme.test"})
    token = acme().inbound_domain_token
    owner.post(MAIL, {"inbound_domain": "agents.acme.test"})  # asked again: the same record stays good

    assert acme().inbound_domain_token == token
    assert resolve_recipient("sdr@mail.acme.test").agent == team.sdr
    assert resolve_recipient("sdr@agents.acme.test").foreign
    dns_server.publish("_agentcal.agents.acme.test", f"agentcal-verification={token}")
    assert owner.post(MAIL, VERIFY).status_code == 302
    assert resolve_recipient("sdr@agents.acme.test").agent == team.sdr
    assert resolve_recipient("sdr@mail.acme.test").foreign  # the previous custom domain is let go

    # Asking for the domain in use drops nothing and needs no proof.
    assert owner.post(MAIL, {"inbound_domain": "agents.acme.test"}).status_code == 302
    assert acme().inbound_domain == "agents.acme.test" and acme().inbound_domain_pending == ""


def test_a_claimed_domain_does_not_block_its_owner_and_the_first_to_prove_it_wins(team, dns_server):  # noqa: F811
    """Asking is free and blocks nobody: a squatter's request for someone's domain waits forever, the
    owner asks too and proves it; a second workspace that could publish a record too comes second."""
    squatter, owner = signed_in(team.outsider), signed_in(team.owner)
    assert squatter.post("/w/globex/settings/mail", {"inbound_domain": "acme.test"}).status_code == 302
    assert owner.post(MAIL, {"inbound_domain": "acme.test"}).status_code == 302
    dns_server.publish("_agentcal.acme.test", f"agentcal-verification={acme().inbound_domain_token}")
    globex = Workspace.objects.get(slug="globex")
    dns_server.publish("_agentcal.acme.test", f"agentcal-verification={globex.inbound_domain_token}")

    assert owner.post(MAIL, VERIFY).status_code == 302
    second = squatter.post("/w/globex/settings/mail", VERIFY)

    assert second.status_code == 409
    assert "acme.test was verified by another workspace first." in text(second)
    assert acme().inbound_domain == "acme.test"
    assert Workspace.objects.get(slug="globex").inbound_domain == ""
    (refused,) = audit_rows("workspace.inbound_domain.verify.rejected")
    assert refused.failure_reason == "inbound_domain_taken" and refused.workspace_id == globex.pk


@pytest.mark.parametrize(
    ("domain", "error"),
    [
        ("not a domain", "Enter a host name such as mail.example.com"),
        ("localhost", "Enter a host name such as mail.example.com"),
        ("-bad.example.com", "Enter a host name such as mail.example.com"),
        ("b\u00fccher.example", "Enter a host name such as mail.example.com"),
        ("10.0.0.1", "not an IP address"),
        ("globex.agentcal.localhost", "Names under agentcal.localhost are reserved"),
        ("agentcal.localhost", "Names under agentcal.localhost are reserved"),
        ("taken.example.com", "already receives another workspace&#x27;s mail"),
        ("x" * 250 + ".com", "Ensure this value has at most 253 characters"),
    ],
)
def test_a_domain_that_is_not_allowed_is_a_form_error_and_changes_nothing(team, domain, error):
    Workspace.objects.filter(pk=team.other_workspace.pk).update(
        inbound_domain="taken.example.com", inbound_domain_verified_at=Now()
    )

    response = signed_in(team.admin).post(MAIL, {"inbound_domain": domain})

    assert response.status_code == 400
    assert error in text(response)
    assert 'data-testid="domain-error"' in text(response)
    assert acme().inbound_domain == "" and acme().inbound_domain_pending == ""
    assert audit_rows("workspace.inbound_domain.updated") == []
    assert audit_rows("workspace.inbound_domain.requested") == []


def test_members_cannot_change_anything_and_posts_need_a_csrf_token(team):
    member = signed_in(team.member)
    assert member.post(MAIL, {"inbound_domain": "mail.acme.test"}).status_code == 403
    assert member.post(MAIL, VERIFY).status_code == 403
    assert member.post(SECRET).status_code == 403
    strict_owner = signed_in(team.owner, enforce_csrf_checks=True)
    assert strict_owner.post(MAIL, {"inbound_domain": "mail.acme.test"}).status_code == 403
    assert strict_owner.post(MAIL, VERIFY).status_code == 403
    assert strict_owner.post(SECRET).status_code == 403
    assert acme().inbound_domain_pending == "" and acme().inbound_webhook_secret == ""
    assert audit_rows("workspace.inbound_domain.verify.rejected") == []
    assert signed_in(team.outsider).post(SECRET).status_code == 404


# --- The webhook secret ------------------------------------------------------------------------------------


def generate(client: Client) -> str:
    """POST for a secret, follow the 303 to its page, and return the secret it shows (once)."""
    posted = client.post(SECRET)
    assert posted.status_code == 303 and posted["Location"] == SECRET  # post/redirect/get
    page = client.get(SECRET)
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    match = NEW_SECRET.search(text(page))
    assert match, text(page)
    assert match.group(1) not in posted["Location"]
    return match.group(1)


def test_a_generated_secret_is_shown_once_kept_sealed_and_verifies_the_webhook(team):
    owner = signed_in(team.owner)
    secret = generate(owner)

    stored = acme().inbound_webhook_secret
    assert secret not in stored and inbound_webhook_secret(acme()) == secret  # sealed, not in the clear
    assert tables_containing(secret) == []  # the session's copy went with the page that showed it
    # A reload shows "already shown" and generates nothing; the settings page never shows it.
    reload = owner.get(SECRET)
    assert reload.status_code == 200 and secret not in text(reload)
    assert 'data-testid="secret-already-shown"' in text(reload) and "already shown" in text(reload)
    assert inbound_webhook_secret(acme()) == secret
    assert secret not in text(owner.get(MAIL))
    assert 'data-testid="secret-status">set' in text(owner.get(MAIL))
    (row,) = audit_rows("workspace.inbound_webhook_secret.created")
    assert row.actor_user == "olivia@acme.test" and secret not in str(row.details)
    assert hook_status(team.workspace, secret) == 422  # verified; then refused for its recipient


def test_the_secrets_page_opened_later_or_by_someone_else_explains_instead_of_failing(team):
    generate(signed_in(team.owner))
    for person in (team.admin, team.member):  # not the one who generated it
        page = signed_in(person).get(SECRET)
        assert page.status_code == 200 and NEW_SECRET.search(text(page)) is None
        assert "shown once" in text(page)


def test_the_secret_waits_for_its_page_only_a_few_minutes(team):
    owner = signed_in(team.owner)
    with time_machine.travel(datetime.now(UTC)) as traveller:
        assert owner.post(SECRET).status_code == 303
        traveller.shift(timedelta(minutes=11))
        page = owner.get(SECRET)
    assert NEW_SECRET.search(text(page)) is None and "shown once" in text(page)
    assert owner.session.get("one_time_secrets") is None


def test_rotating_replaces_the_secret_at_once(team):
    owner = signed_in(team.owner)
    first = generate(owner)
    assert "Rotate secret" in text(owner.get(MAIL))

    assert owner.post(SECRET).status_code == 303
    response = owner.get(SECRET)

    assert "Secret rotated" in text(response)
    second = NEW_SECRET.search(text(response))
    assert second and second.group(1) != first
    assert hook_status(team.workspace, first) == 401
    assert hook_status(team.workspace, second.group(1)) == 422
    assert len(audit_rows("workspace.inbound_webhook_secret.rotated")) == 1


def test_ops_generate_and_rotate_the_secret_with_a_management_command(team):
    out = StringIO()
    call_command("inbound_webhook_secret", "acme", stdout=out)
    secret = out.getvalue().strip()
    assert secret.startswith("whsec_") and inbound_webhook_secret(acme()) == secret

    with pytest.raises(CommandError, match="not shown again"):
        call_command("inbound_webhook_secret", "acme", stdout=StringIO())
    rotated = StringIO()
    call_command("inbound_webhook_secret", "acme", "--rotate", stdout=rotated)
    assert rotated.getvalue().strip() not in ("", secret)
    with pytest.raises(CommandError, match="No workspace"):
        call_command("inbound_webhook_secret", "initech", stdout=StringIO())
    rows = audit_rows("workspace.inbound_webhook_secret.created") + audit_rows(
        "workspace.inbound_webhook_secret.rotated"
    )
    assert [row.details for row in rows] == [{"by": "manage.py inbound_webhook_secret"}] * 2
