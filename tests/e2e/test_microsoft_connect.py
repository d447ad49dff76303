"""End to end in real Chromium: an owner links a calendar to Microsoft 365 through the dashboard's
OAuth flow — consent on the (fake) Microsoft identity platform, redirect back, the calendar picked —
and an event the person adds in Outlook blocks agents after the change notification."""

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
from tests.sync.graph_fake import CLIENT_ID, CLIENT_SECRET, DEFAULT_ACCOUNT, GraphFake
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


@pytest.fixture
def oauth_settings(live_server: Any, settings: Any, graph_fake: GraphFake) -> Any:  # noqa: F811
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.DASHBOARD_BASE_URL = base
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.CSRF_TRUSTED_ORIGINS = [base]
    settings.SYNC_MICROSOFT_CLIENT_ID = CLIENT_ID
    settings.SYNC_MICROSOFT_CLIENT_SECRET = CLIENT_SECRET
    settings.SYNC_MICROSOFT_AUTHORITY_URL = graph_fake.url
    settings.SYNC_MICROSOFT_API_URL = graph_fake.api_url
    settings.SYNC_PUSH_BASE_URL = base
    graph_fake.redirect_uris = {f"{base}/oauth/microsoft/callback"}
    graph_fake.add_calendar(DEFAULT_ACCOUNT, "AAMkCalendar", "Calendar", is_default=True)
    graph_fake.add_calendar(DEFAULT_ACCOUNT, "AAMkOffsites", "Team offsites")
    return settings


def test_owner_connects_microsoft_365_through_consent_and_picks_the_calendar(
    live_server: Any,
    oauth_settings: Any,
    browser_page: Any,
    transactional_db: Any,
    graph_fake: GraphFake,  # noqa: F811
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
    page.get_by_test_id("oauth-microsoft").get_by_role("button").click()
    page.wait_for_url(f"{graph_fake.url}/common/oauth2/v2.0/authorize**")
    page.locator("#allow").click()
    page.wait_for_url(f"{base}/oauth/microsoft/callback**")
    choices = page.get_by_test_id("remote-calendar")
    assert choices.count() == 2
    page.locator("input[value='AAMkCalendar']").check()
    page.get_by_test_id("pick-form").get_by_role("button").click()
    page.wait_for_url(f"{base}/w/acme/calendars/{calendar.public_id}")

    connection = Connection.objects.get(calendar=calendar)
    assert (connection.provider, connection.remote_calendar_id, connection.username) == (
        "microsoft",
        "AAMkCalendar",
        DEFAULT_ACCOUNT,
    )
    assert connection_sync(connection.pk).outcome == "synced"
    connection.refresh_from_db()
    assert connection.push_id, "a subscription opened through the real validation handshake"

    # The person adds an event in Google; the notification reaches our endpoint and asks for a sync.
    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    graph_fake.human_put(
        "AAMkCalendar",
        {
            "subject": "Dentist",
            "start": {"dateTime": start.replace(tzinfo=None).isoformat(), "timeZone": "UTC"},
            "end": {
                "dateTime": (start + timedelta(hours=1)).replace(tzinfo=None).isoformat(),
                "timeZone": "UTC",
            },
        },
    )
    graph_fake.wait_for_deliveries(1, kind="notification")
    connection.refresh_from_db()
    assert connection.last_push_at is not None
    assert connection_sync(connection.pk).outcome == "synced"

    page.reload()
    panel = page.get_by_test_id("connection-panel")
    assert panel.get_by_test_id("connection-status").inner_text() == "active"
    assert panel.get_by_test_id("remote-calendar").inner_text() == "Calendar"
    assert page.get_by_text("Microsoft 365 busy").count() == 1, "the person's event on the timeline"
    screenshot(page, "calendar-microsoft-linked")
    assert csp_violations == []
