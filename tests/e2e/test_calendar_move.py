"""End to end in real Chromium, on a laptop and on a phone: an owner opens a booking's drawer, asks for a
taken time (refused in words, free times offered), then moves it with the drawer's form (a day and two
times in the calendar's zone), sees the new time in the drawer and on the timeline and the booking's times
over its life; the page never scrolls sideways and the policy refuses nothing."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.engine import booking_create, calendar_create
from bookings.models import Reservation
from bookings.spans import Span
from tests.e2e.helpers import acme_owner_and_agent, screenshot, sign_in, watch_csp_violations
from workspaces.actor import Actor

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("width", "height"), [(1280, 860), (390, 844)])
def test_owner_moves_a_booking_from_its_drawer(
    width: int,
    height: int,
    live_server: Any,
    browser_page: Any,
    transactional_db: Any,
    settings: Any,
) -> None:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, agent = acme_owner_and_agent()
    as_agent = Actor(workspace=workspace, agent=agent)
    calendar = calendar_create(actor=as_agent, name="Berlin office", timezone="Europe/Berlin")
    day = (datetime.now(UTC) + timedelta(days=2)).date()
    berlin = ZoneInfo("Europe/Berlin")
    start = datetime.combine(day, time(11), tzinfo=berlin).astimezone(UTC)
    booking = booking_create(
        actor=as_agent, calendar=calendar, span=Span(start, start + timedelta(minutes=30)), title="Demo call"
    ).primary
    in_the_way = datetime.combine(day, time(14), tzinfo=berlin)
    booking_create(
        actor=as_agent, calendar=calendar, span=Span(in_the_way, in_the_way + timedelta(minutes=30))
    )
    page = browser_page
    page.set_viewport_size({"width": width, "height": height})
    console_errors: list[str] = []
    page.on(
        "console", lambda message: console_errors.append(message.text) if message.type == "error" else None
    )
    csp_violations = watch_csp_violations(page)
    sign_in(page, owner, base)

    page.goto(f"{base}/w/acme/calendars/{calendar.public_id}?view=day&date={day.isoformat()}")
    block = page.locator(f'a.block[data-reservation="{booking.booking_id}"]')
    block.click()
    drawer = page.locator("#cal-drawer")
    expect(drawer).to_have_attribute("open", "")
    form = drawer.get_by_test_id("move-form")
    expect(form).to_contain_text("New time, in Europe/Berlin")
    expect(form.locator('input[name="start"]')).to_have_value("11:00")
    expect(drawer.get_by_test_id("drawer-spans")).to_contain_text("Booked for")

    # A taken time is refused in words, with the free times nearest it offered as buttons.
    form.locator('input[name="start"]').fill("14:00")
    form.locator('input[name="end"]').fill("14:30")
    form.get_by_test_id("move-submit").click()
    expect(drawer.get_by_test_id("move-error")).to_contain_text("Not moved: ")
    expect(drawer.get_by_test_id("move-offer").first).to_contain_text("Move to ")
    expect(drawer.get_by_test_id("drawer-local-time")).to_contain_text("11:00 – 11:30")
    drawer.get_by_test_id("drawer-move").scroll_into_view_if_needed()
    screenshot(page, f"calendar-drawer-move-refused-{width}")
    form = drawer.get_by_test_id("move-form")

    form.locator('input[name="start"]').fill("15:00")
    form.locator('input[name="end"]').fill("15:30")
    form.get_by_test_id("move-submit").click()

    words = f"{day:%a} {day.day} {day:%b} 15:00–15:30"
    expect(drawer.get_by_test_id("drawer-notice")).to_have_text(
        f"Moved Demo call to {words} (Europe/Berlin). SDR bot has been told."
    )
    expect(drawer.get_by_test_id("drawer-local-time")).to_contain_text("15:00 – 15:30")
    expect(drawer.get_by_test_id("drawer-spans")).to_contain_text(f"Moved to {words} by olivia@acme.test")
    block_title = "Demo call · 15:00–15:30 CET · committed · priority 100 · SDR bot"  # in Berlin, named
    expect(block).to_have_attribute("title", block_title)
    screenshot(page, f"calendar-drawer-moved-{width}")
    drawer.get_by_test_id("drawer-spans").scroll_into_view_if_needed()
    screenshot(page, f"calendar-drawer-moved-history-{width}")

    moved = Reservation.objects.get(pk=booking.pk)
    assert moved.start_time == datetime.combine(day, time(15), tzinfo=berlin)
    assert AuditRecord.objects.get(event_type=AuditEvent.BOOKING_MOVED).actor_user == "olivia@acme.test"
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("(d => d.scrollWidth <= d.clientWidth)(document.querySelector('#cal-drawer'))")
    assert csp_violations == [], "\n".join(csp_violations)
    assert console_errors == [], "\n".join(console_errors)
