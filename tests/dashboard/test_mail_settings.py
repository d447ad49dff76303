"""Mail settings: members read the inbound domain, the MX record and the webhook URL; owners and admins
set the domain (a hostname of their own, unique, not under AgentCal's suffix) and generate or rotate the
inbound webhook's secret, shown once. Every change is audited with the person's email."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from base64 import b64encode
from io import StringIO

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.management import CommandError, call_command
from django.test import Client

from audit.models import AuditRecord
from inboxes.addresses import resolve_recipient
from inboxes.mail_settings import inbound_webhook_secret
from tests.dashboard.pages_helpers import make_team, signed_in, text
from workspaces.models import Workspace

MAIL = "/w/acme/settings/mail"
SECRET = "/w/acme/settings/mail/secret"
NEW_SECRET = re.compile(r'<code id="new-secret">(whsec_[A-Za-z0-9+/=]+)</code>')


@pytest.fixture
def team(db, django_user_model):
    return make_team(django_user_model)


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
    assert 'href="/w/acme/settings/mail" class="active">Mail setup</a>' in html  # the nav link


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


def test_an_owner_sets_a_domain_of_their_own_and_agents_receive_mail_there(team):
    owner = signed_in(team.owner)
    response = owner.post(MAIL, {"inbound_domain": " Mail.Acme.Test. "})

    assert response.status_code == 302 and response["Location"] == MAIL
    assert acme().inbound_domain == "mail.acme.test"
    assert resolve_recipient("sdr@mail.acme.test").agent == team.sdr
    assert resolve_recipient("sdr@acme.agentcal.localhost").agent == team.sdr  # the default still works
    (row,) = audit_rows("workspace.inbound_domain.updated")
    assert row.actor_user == "olivia@acme.test" and row.workspace_id == team.workspace.pk
    assert row.details == {"from": "acme.agentcal.localhost", "to": "mail.acme.test"}
    page = text(owner.get(MAIL))
    assert "Agents now receive mail at …@mail.acme.test." in page
    assert "mail.acme.test. IN MX 10" in page

    back = owner.post(MAIL, {"inbound_domain": "acme.agentcal.localhost"})
    assert back.status_code == 302 and acme().inbound_domain == ""  # its own default: stored as blank


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
    Workspace.objects.filter(pk=team.other_workspace.pk).update(inbound_domain="taken.example.com")

    response = signed_in(team.admin).post(MAIL, {"inbound_domain": domain})

    assert response.status_code == 400
    assert error in text(response)
    assert 'data-testid="domain-error"' in text(response)
    assert acme().inbound_domain == ""
    assert audit_rows("workspace.inbound_domain.updated") == []


def test_members_cannot_change_anything_and_posts_need_a_csrf_token(team):
    member = signed_in(team.member)
    assert member.post(MAIL, {"inbound_domain": "mail.acme.test"}).status_code == 403
    assert member.post(SECRET).status_code == 403
    strict_owner = signed_in(team.owner, enforce_csrf_checks=True)
    assert strict_owner.post(MAIL, {"inbound_domain": "mail.acme.test"}).status_code == 403
    assert strict_owner.post(SECRET).status_code == 403
    assert acme().inbound_domain == "" and acme().inbound_webhook_secret == ""
    assert signed_in(team.outsider).post(SECRET).status_code == 404


# --- The webhook secret ------------------------------------------------------------------------------------


def test_a_generated_secret_is_shown_once_kept_sealed_and_verifies_the_webhook(team):
    owner = signed_in(team.owner)
    response = owner.post(SECRET)

    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]
    match = NEW_SECRET.search(text(response))
    assert match, text(response)
    secret = match.group(1)
    stored = acme().inbound_webhook_secret
    assert secret not in stored and inbound_webhook_secret(acme()) == secret  # sealed, not in the clear
    assert secret not in text(owner.get(MAIL))  # shown once
    assert 'data-testid="secret-status">set' in text(owner.get(MAIL))
    (row,) = audit_rows("workspace.inbound_webhook_secret.created")
    assert row.actor_user == "olivia@acme.test" and secret not in str(row.details)
    assert hook_status(team.workspace, secret) == 422  # verified; then refused for its recipient


def test_rotating_replaces_the_secret_at_once(team):
    owner = signed_in(team.owner)
    first = NEW_SECRET.search(text(owner.post(SECRET)))
    assert first
    assert "Rotate secret" in text(owner.get(MAIL))

    response = owner.post(SECRET)

    assert response.status_code == 201 and "Secret rotated" in text(response)
    second = NEW_SECRET.search(text(response))
    assert second and second.group(1) != first.group(1)
    assert hook_status(team.workspace, first.group(1)) == 401
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
