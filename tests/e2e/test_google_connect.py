"""End to end in real Chromium: an owner links a calendar to Google Calendar through the dashboard's
OAuth flow — consent on the (fake) Google authorization server, redirect back, the calendar picked —
and an event the person adds in Google blocks agents after the push notification."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from bookings import engine
from sync.models import Connection
from sync.services import connection_sync
from tests.e2e.helpers import screenshot, watch_csp_violations
from tests.sync.google_fake import DEFAULT_ACCOUNT, GoogleFake
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


@pytest.fixture
def oauth_settings(live_server: Any, settings: Any, google_fake: GoogleFake) -> Any:  # noqa: F811
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.DASHBOARD_BASE_URL = base
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.CSRF_TRUSTED_ORIGINS = [base]
    settings.SYNC_GOOGLE_CLIENT_ID = "agentcal-e2e.apps.googleusercontent.com"
    settings.SYNC_GOOGLE_CLIENT_SECRET = "agentcal-e2e-secret"
    settings.SYNC_GOOGLE_AUTH_URL = google_fake.auth_url
    settings.SYNC_GOOGLE_TOKEN_URL = google_fake.token_url
    settings.SYNC_GOOGLE_API_URL = google_fake.api_url
    settings.SYNC_PUSH_BASE_URL = base
    google_fake.register_client(
        settings.SYNC_GOOGLE_CLIENT_ID, settings.SYNC_GOOGLE_CLIENT_SECRET, {f"{base}/oauth/google/callback"}
    )
    # As in Google, the primary calendar's id is the account's address.
    google_fake.add_calendar(DEFAULT_ACCOUNT, DEFAULT_ACCOUNT, "Alice", primary=True)
    google_fake.add_calendar(DEFAULT_ACCOUNT, "team-offsites", "Team offsites")
    return settings


def test_owner_connects_google_calendar_through_consent_and_picks_the_calendar(
    live_server: Any,
    oauth_settings: Any,
    browser_page: Any,
    transactional_db: Any,
    google_fake: GoogleFake,  # noqa: F811
) -> None:
    base = oauth_settings.DASHBOARD_BASE_URL
    page = browser_page
    csp_violations = watch_csp_violations(page)
    out = StringIO()
    call_command("create_owner", "olivia@acme.test", "--workspace", "acme", stdout=out, stderr=StringIO())
    page.goto(out.getvalue().strip().splitlines()[-1])
    page.get_by_test_id("magic-continue").click()
    page.wait_for_url(f"{base}/auth/passkeys")

    workspace = Workspace.objects.get(slug="acme")
    agent = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=100
    )
    calendar = engine.calendar_create(actor=Actor(workspace=workspace, agent=agent), name="Olivia")
    page.goto(f"{base}/w/acme/calendars/{calendar.public_id}")

    # Connect → Google's consent page (the fake's) → Allow → back to AgentCal's calendar picker.
    page.get_by_test_id("oauth-google").get_by_role("button").click()
    page.wait_for_url(f"{google_fake.auth_url}**")
    page.locator("#allow").click()
    page.wait_for_url(f"{base}/oauth/google/callback**")
    choices = page.get_by_test_id("remote-calendar")
    assert choices.count() == 2
    page.locator(f"input[value='{DEFAULT_ACCOUNT}']").check()
    page.get_by_test_id("pick-form").get_by_role("button").click()
    page.wait_for_url(f"{base}/w/acme/calendars/{calendar.public_id}")

    connection = Connection.objects.get(calendar=calendar)
    assert (connection.provider, connection.remote_calendar_id, connection.username) == (
        "google",
        DEFAULT_ACCOUNT,
        DEFAULT_ACCOUNT,
    )
    assert connection_sync(connection.pk).outcome == "synced"
    connection.refresh_from_db()
    assert connection.push_id, "a push channel opened through the real handshake"

    # The person adds an event in Google; the notification reaches our endpoint and asks for a sync.
    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    google_fake.human_put(
        DEFAULT_ACCOUNT,
        {
            "summary": "Dentist",
            "start": {"dateTime": start.isoformat()},
            "end": {"dateTime": (start + timedelta(hours=1)).isoformat()},
        },
    )
    google_fake.settle()
    connection.refresh_from_db()
    assert connection.last_push_at is not None
    assert connection_sync(connection.pk).outcome == "synced"

    page.reload()
    panel = page.get_by_test_id("connection-panel")
    assert panel.get_by_test_id("connection-status").inner_text() == "active"
    assert panel.get_by_test_id("remote-calendar").inner_text() == "Alice"
    screenshot(page, "calendar-google-linked")
    assert csp_violations == []
