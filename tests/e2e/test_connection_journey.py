"""End to end in real Chromium: an owner links a calendar to a real CalDAV server (Radicale) from the
calendar's page, syncs it, and sees the owner's own events block the timeline."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from bookings import engine
from bookings.spans import Span
from sync.models import Connection
from sync.services import connection_sync
from tests.e2e.helpers import screenshot, watch_csp_violations
from tests.sync.radicale import CalDAVAccount, Human, ics_event
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


SCREENSHOT = "/tmp/dashboard-connection.png"


@pytest.fixture
def dashboard_settings(dashboard_settings: Any) -> Any:
    # Radicale listens on 127.0.0.1, which upstream URLs may not reach in production.
    dashboard_settings.SYNC_ALLOW_PRIVATE_TARGETS = True
    return dashboard_settings


def test_owner_links_a_caldav_calendar_and_its_events_block_the_timeline(
    live_server: Any,
    dashboard_settings: Any,
    browser_page: Any,
    transactional_db: Any,
    caldav_calendar: CalDAVAccount,
    human: Human,
) -> None:
    base = dashboard_settings.DASHBOARD_BASE_URL
    page = browser_page
    csp_violations = watch_csp_violations(page)

    # The owner signs in with the magic link `create_owner` prints.
    out = StringIO()
    call_command("create_owner", "olivia@acme.test", "--workspace", "acme", stdout=out, stderr=StringIO())
    page.goto(out.getvalue().strip().splitlines()[-1])
    page.get_by_test_id("magic-continue").click()
    page.wait_for_url(f"{base}/auth/passkeys")

    # A calendar an agent books on, with a booking the owner's own calendar will overlap.
    workspace = Workspace.objects.get(slug="acme")
    agent = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=100
    )
    agent_actor = Actor(workspace=workspace, agent=agent)
    calendar = engine.calendar_create(actor=agent_actor, name="Olivia")
    day = (datetime.now(UTC) + timedelta(days=2)).date()

    def at(hour: int) -> datetime:
        return datetime.combine(day, time(hour), tzinfo=UTC)

    engine.booking_create(
        actor=agent_actor,
        calendar=calendar,
        span=Span(at(14), at(14) + timedelta(minutes=30)),
        title="Demo call",
    )
    human.put("dentist.ics", ics_event("dentist", summary="Dentist", start=at(9), minutes=60))
    human.put("offsite.ics", ics_event("offsite", summary="Offsite", start=at(13), minutes=120))

    calendar_page = f"{base}/w/acme/calendars/{calendar.public_id}?view=week&date={day.isoformat()}"
    page.goto(calendar_page)
    panel = page.get_by_test_id("connection-panel")
    assert panel.get_attribute("data-state") == "unlinked"

    # 1. A wrong password: refused in the form, what was typed kept but the password.
    page.get_by_label("CalDAV calendar URL").fill(caldav_calendar.url)
    page.get_by_label("Username").fill(caldav_calendar.username)
    page.get_by_label("App password").fill("a-wrong-app-password")
    page.get_by_role("button", name="Connect CalDAV").click()
    page.get_by_test_id("connect-error").wait_for()
    assert "refused the username or password" in page.get_by_test_id("connect-error").inner_text()
    assert page.get_by_label("CalDAV calendar URL").input_value() == caldav_calendar.url
    assert page.get_by_label("App password").input_value() == ""
    assert not Connection.objects.exists()
    screenshot(page, "calendar-connect-refused")

    # 2. The right one: linked, waiting for its first sync.
    page.get_by_label("App password").fill(caldav_calendar.password)
    page.get_by_role("button", name="Connect CalDAV").click()
    page.wait_for_url(f"{base}/w/acme/calendars/{calendar.public_id}")
    assert "is linked to" in page.locator(".flash").inner_text()
    assert page.get_by_test_id("connection-panel").get_attribute("data-state") == "linked"
    connection = Connection.objects.get(calendar=calendar)
    assert caldav_calendar.password not in page.content()

    # 3. Sync now marks it due; a worker's run (here, in-process) makes it active, and the panel and
    #    the timeline, which poll, show it without a reload.
    page.goto(calendar_page)
    page.get_by_role("button", name="Sync now").click()
    page.wait_for_url(f"{base}/w/acme/calendars/{calendar.public_id}")
    assert "Sync requested" in page.locator(".flash").inner_text()
    page.goto(calendar_page)
    assert connection_sync(connection.pk).outcome == "synced"
    page.locator('[data-testid="connection-status"]:text-is("active")').wait_for()
    busy = page.get_by_test_id("busy-block")
    busy.first.wait_for()
    assert busy.count() == 2
    assert "CalDAV busy" in busy.first.inner_text()
    assert page.eval_on_selector('[data-testid="busy-block"]', "e => e.style.height")  # placed by app.js
    flagged = page.locator('[data-conflict="upstream"]')
    assert flagged.count() == 1 and "owner's own calendar" in (flagged.get_attribute("title") or "")
    page.screenshot(path=SCREENSHOT, full_page=True)
    screenshot(page, "calendar-connection")

    # 4. The calendar list and the metrics page show the link.
    page.goto(f"{base}/w/acme/calendars")
    assert page.get_by_test_id("upstream").first.inner_text().startswith("active")
    screenshot(page, "calendars-linked")
    page.goto(f"{base}/w/acme/metrics")
    assert page.get_by_test_id("sync-row").count() == 1
    screenshot(page, "metrics-sync")

    # 5. Disconnect, after the confirmation: the busy time stops blocking at once.
    page.goto(calendar_page)
    page.get_by_role("button", name="Disconnect").click()
    page.get_by_role("button", name="Yes, disconnect").click()
    page.wait_for_url(f"{base}/w/acme/calendars/{calendar.public_id}")
    assert page.get_by_test_id("connection-panel").get_attribute("data-state") == "unlinked"
    assert not Connection.objects.exists()
    page.goto(calendar_page)
    assert page.get_by_test_id("busy-block").count() == 0

    assert csp_violations == []
