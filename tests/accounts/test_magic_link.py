"""Magic links: the bootstrap and recovery path. Single use, 15 minutes, throttled, never revealing."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db.models.functions import Now

from accounts.links import MAX_LINKS_PER_EMAIL
from accounts.models import MagicLink
from accounts.services import MAX_LINKS_PER_IP
from tests.accounts.helpers import ORIGIN


def link_from(mail) -> str:
    match = re.search(r"https?://\S+/auth/magic/(\S+)", mail.body)
    assert match, mail.body
    return match.group(1)


@pytest.fixture
def base_url(settings):
    settings.DASHBOARD_BASE_URL = ORIGIN
    return settings


def test_a_link_signs_in_once_and_asks_for_a_passkey(client, owner, mailoutbox, base_url):
    page = client.post("/auth/magic-link", {"email": "Olivia@Acme.test "})
    assert page.status_code == 200 and "Check your email" in page.content.decode()
    (mail,) = mailoutbox
    assert mail.to == ["olivia@acme.test"]
    token = link_from(mail)

    # GET only shows a button (mail scanners that prefetch links must not use them up).
    assert client.get(f"/auth/magic/{token}").status_code == 200
    assert MagicLink.objects.get().used_at is None
    response = client.post(f"/auth/magic/{token}")
    assert response.status_code == 302 and response.url == "/auth/passkeys"
    assert "Add a passkey now" in client.get("/auth/passkeys").content.decode()

    client.post("/auth/sign-out")
    again = client.post(f"/auth/magic/{token}")
    assert again.status_code == 400
    assert client.get("/").status_code == 302  # not signed in


def test_an_unknown_address_gets_the_same_answer_and_no_email(client, owner, mailoutbox, base_url):
    def page(email: str) -> str:
        html = client.post("/auth/magic-link", {"email": email}).content.decode()
        html = re.sub(r"[A-Za-z0-9]{64}", "TOKEN", html)  # per-response CSRF tokens
        return html.replace(email.split("@")[0], "X")

    assert page("olivia@acme.test") == page("nobody@acme.test")
    assert len(mailoutbox) == 1


def test_an_address_postgresql_cannot_take_gets_the_same_answer_and_no_email(
    client, owner, mailoutbox, base_url
):
    response = client.post("/auth/magic-link", {"email": "olivia\x00@acme.test"})
    assert response.status_code == 200 and "Check your email" in response.content.decode()
    assert mailoutbox == [] and not MagicLink.objects.exists()


def test_an_expired_link_does_not_sign_in(client, owner, mailoutbox, base_url):
    client.post("/auth/magic-link", {"email": "olivia@acme.test"})
    token = link_from(mailoutbox[0])
    link = MagicLink.objects.get()
    MagicLink.objects.filter(pk=link.pk).update(
        created_at=link.created_at - timedelta(minutes=20), expires_at=link.created_at - timedelta(minutes=5)
    )
    assert client.post(f"/auth/magic/{token}").status_code == 400


def spent_state(response) -> str | None:
    match = re.search(r'data-testid="magic-link-spent" data-state="(\w+)"', response.content.decode())
    return match.group(1) if match else None


def test_a_used_or_expired_link_says_so_before_any_button_and_offers_a_new_one(
    client, owner, mailoutbox, base_url
):
    client.post("/auth/magic-link", {"email": "olivia@acme.test"})
    client.post("/auth/magic-link", {"email": "olivia@acme.test"})
    used, expired = link_from(mailoutbox[0]), link_from(mailoutbox[1])
    live = client.get(f"/auth/magic/{used}")
    assert (
        live.status_code == 200
        and spent_state(live) is None
        and b'data-testid="magic-continue"' in live.content
    )

    client.post(f"/auth/magic/{used}")  # signs in: the link is spent
    client.post("/auth/sign-out")
    MagicLink.objects.filter(used_at__isnull=True).update(expires_at=Now())  # expired by the database's clock

    for token, state, status in (
        (used, "used", 410),
        (expired, "expired", 410),
        ("not-a-link", "unknown", 404),
    ):
        page = client.get(f"/auth/magic/{token}")
        assert (page.status_code, spent_state(page)) == (status, state)
        assert b'data-testid="magic-continue"' not in page.content  # no button that can only fail
        assert b'data-testid="magic-link-again"' in page.content
    # The form on that page asks for a new link, which works.
    client.post("/auth/magic-link", {"email": "olivia@acme.test"})
    fresh = client.get(f"/auth/magic/{link_from(mailoutbox[-1])}")
    assert fresh.status_code == 200 and b'data-testid="magic-continue"' in fresh.content
    assert MagicLink.objects.filter(used_at__isnull=True).count() == 2  # looking used up nothing


def test_a_used_link_opened_while_signed_in_leads_on_to_the_dashboard(client, owner, mailoutbox, base_url):
    client.post("/auth/magic-link", {"email": "olivia@acme.test"})
    token = link_from(mailoutbox[0])
    client.post(f"/auth/magic/{token}")
    page = client.get(f"/auth/magic/{token}").content.decode()
    assert "You are signed in as <strong>olivia@acme.test</strong>" in page and 'href="/"' in page
    assert 'data-testid="magic-link-again"' not in page


def test_requests_are_throttled_per_address_and_per_ip(client, owner, mailoutbox, base_url):
    for _ in range(MAX_LINKS_PER_EMAIL + 3):
        client.post("/auth/magic-link", {"email": "olivia@acme.test"})
    assert len(mailoutbox) == MAX_LINKS_PER_EMAIL
    for i in range(MAX_LINKS_PER_IP + 5):
        client.post("/auth/magic-link", {"email": f"probe{i}@acme.test"}, REMOTE_ADDR="203.0.113.9")
    assert MagicLink.objects.filter(requested_ip="203.0.113.9").count() == MAX_LINKS_PER_IP


def test_sign_out_everywhere_ends_every_session(owner, client, django_user_model):
    from django.test import Client

    other_browser = Client()
    client.force_login(owner)
    other_browser.force_login(owner)
    # ["Location"] is what a redirect's .url reads; the stubs type the test client's response without it.
    assert other_browser.get("/").status_code == 302
    assert other_browser.get("/")["Location"] == "/w/acme/start"  # a new workspace: the guide
    client.post("/auth/sign-out-everywhere")
    assert other_browser.get("/")["Location"].startswith("/auth/sign-in")
    assert client.get("/").url.startswith("/auth/sign-in")


def test_create_owner_prints_a_one_time_link(db, capsys, client, base_url):
    call_command("create_owner", "new@acme.test", "--workspace", "fresh")
    link = capsys.readouterr().out.strip().splitlines()[-1]
    assert link.startswith(f"{ORIGIN}/auth/magic/")
    token = link.rsplit("/", 1)[1]
    assert client.post(f"/auth/magic/{token}").status_code == 302
    assert client.get("/").url == "/w/fresh/start"  # a new workspace's owner: its getting-started guide


def test_csrf_is_enforced_on_sign_in_forms(owner):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    assert strict.post("/auth/magic-link", {"email": "olivia@acme.test"}).status_code == 403
    assert strict.post("/auth/passkeys/authenticate/options").status_code == 403


def test_old_links_are_purged_and_recent_ones_kept(owner, base_url):
    from accounts.links import magic_links_purge

    recent = magic_link_issue_for("olivia@acme.test")
    old = magic_link_issue_for("olivia@acme.test")
    MagicLink.objects.filter(token_hash=old).update(
        created_at=MagicLink.objects.get(token_hash=old).created_at - timedelta(days=8),
        expires_at=MagicLink.objects.get(token_hash=old).created_at - timedelta(days=7, hours=23),
    )
    assert magic_links_purge() == 1
    assert list(MagicLink.objects.values_list("token_hash", flat=True)) == [recent]


def magic_link_issue_for(email: str) -> str:
    import hashlib

    from accounts.links import magic_link_issue

    return hashlib.sha256(magic_link_issue(email=email).encode()).hexdigest()


def test_expired_sessions_are_purged_and_live_ones_kept(owner):
    from django.conf import settings
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    from accounts.tasks import purge_expired_sessions

    live, lapsed = SessionStore(), SessionStore()
    live["visited"] = lapsed["visited"] = True
    live.create()
    lapsed.create()
    Session.objects.filter(session_key=lapsed.session_key).update(
        expire_date=timezone.now() - timedelta(seconds=1)
    )

    purge_expired_sessions.apply()

    assert set(Session.objects.values_list("session_key", flat=True)) == {live.session_key}
    beat = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "accounts.purge_expired_sessions" in beat
