"""End to end in real Chromium: an owner opens a booking's drawer on the calendar page from the keyboard
(Enter on its block; Escape closes the drawer and gives the focus back), then cancels the booking through
the drawer's confirm step; the timeline drops it at once, the audit row names the owner and the agent's
webhook event is queued."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.engine import booking_create, calendar_create, hold_create
from bookings.models import Reservation, ReservationStatus
from bookings.spans import Span
from tests.e2e.helpers import acme_owner_and_agent, screenshot, sign_in, watch_csp_violations
from webhooks.models import OutboxEvent
from workspaces.actor import Actor

pytestmark = pytest.mark.slow


def press_tab_until(page: Any, selector: str, *, most: int = 12) -> None:
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_owner_opens_a_booking_by_keyboard_and_cancels_it(
    live_server: Any, browser_page: Any, transactional_db: Any, settings: Any
) -> None:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, agent = acme_owner_and_agent()
    as_agent = Actor(workspace=workspace, agent=agent)
    calendar = calendar_create(actor=as_agent, name="Sales team", timezone="UTC")
    day = (datetime.now(UTC) + timedelta(days=2)).date()
    start = datetime.combine(day, time(10), tzinfo=UTC)
    booking = booking_create(
        actor=as_agent,
        calendar=calendar,
        span=Span(start, start + timedelta(hours=1)),
        title="Demo call",
        attendees=[{"email": "ana@globex.example", "name": "Ana Lopez", "response": "accepted"}],
    ).primary
    hold_create(
        actor=as_agent, calendar=calendar, span=Span(start + timedelta(hours=3), start + timedelta(hours=4))
    )
    page = browser_page
    csp_violations = watch_csp_violations(page)
    sign_in(page, owner, base)

    page.goto(f"{base}/w/acme/calendars/{calendar.public_id}?view=day&date={day.isoformat()}")
    block = page.locator(f'a.block[data-reservation="{booking.booking_id}"]')
    expect(block).to_contain_text("Demo call")

    # From the toolbar's last switch, one Tab reaches the block; Enter opens its drawer, focused.
    page.get_by_test_id("ended-shown").focus()
    press_tab_until(page, f'a.block[data-reservation="{booking.booking_id}"]', most=3)
    page.keyboard.press("Enter")
    drawer = page.locator("#cal-drawer")
    expect(drawer).to_have_attribute("open", "")
    expect(page.locator("#drawer-title")).to_be_focused()
    expect(drawer.get_by_test_id("drawer-status")).to_have_text("committed")
    expect(drawer.get_by_test_id("drawer-attendees")).to_contain_text("Ana Lopez")
    assert page.evaluate("location.hash") == f"#{booking.booking_id}"

    # Escape closes it and gives the focus back to the block.
    page.keyboard.press("Escape")
    expect(drawer).not_to_have_attribute("open", "")
    expect(block).to_be_focused()
    page.wait_for_function("location.hash === ''")  # the dialog's close event comes as a task of its own

    # Again, and on to the cancel, confirmed, all from the keyboard.
    page.keyboard.press("Enter")
    expect(page.locator("#drawer-title")).to_be_focused()
    press_tab_until(page, '[data-testid="drawer-action"]')
    page.keyboard.press("Enter")
    expect(page.locator("#confirm-title")).to_be_focused()
    expect(drawer.get_by_test_id("drawer-confirm")).to_contain_text("SDR bot is told")
    page.set_viewport_size({"width": 1280, "height": 860})
    screenshot(page, "calendar-drawer-confirm")
    press_tab_until(page, '[data-testid="confirm-action"]', most=2)
    page.keyboard.press("Enter")

    expect(drawer.get_by_test_id("drawer-notice")).to_have_text("Booking cancelled. SDR bot has been told.")
    expect(drawer.get_by_test_id("drawer-status")).to_have_text("cancelled")
    expect(block).to_have_count(0)  # the timeline reloaded at once; ended bookings are not shown by default
    expect(page.get_by_test_id("hidden-note")).to_contain_text("1 ended")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "calendar-drawer-cancelled-phone")
    page.keyboard.press("Escape")
    expect(drawer).not_to_have_attribute("open", "")

    assert Reservation.objects.get(pk=booking.pk).status == ReservationStatus.CANCELLED
    audit = AuditRecord.objects.get(event_type=AuditEvent.BOOKING_CANCELLED)
    assert (audit.actor_user, audit.reservation_public_id) == ("olivia@acme.test", booking.booking_id)
    assert OutboxEvent.objects.filter(event_type="booking.cancelled", agent=agent).count() == 1
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    assert csp_violations == [], "\n".join(csp_violations)
