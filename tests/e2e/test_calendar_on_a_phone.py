"""The calendar page in real Chromium: on a phone it opens on today's day with one "View" button for its
switches, on a desktop on the week as before; and a booking's label turns from "bumpable for Ns" to
"frozen" in one step when its bump window ends."""

from __future__ import annotations

import re
import time as clock
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from bookings.engine import booking_create, calendar_create
from bookings.spans import Span
from tests.e2e.helpers import acme_owner_and_agent, screenshot, sign_in, watch_csp_violations
from workspaces.actor import Actor

pytestmark = pytest.mark.slow

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 860}


@pytest.fixture
def sales(live_server: Any, transactional_db: Any, settings: Any) -> dict[str, Any]:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, agent = acme_owner_and_agent()
    as_agent = Actor(workspace=workspace, agent=agent)
    calendar = calendar_create(actor=as_agent, name="Sales team", timezone="UTC", bump_window_seconds=4)
    return {"base": base, "owner": owner, "agent": as_agent, "calendar": calendar}


def visible_in_viewport(page: Any, selector: str) -> bool:
    return page.evaluate(
        """(s) => { const r = document.querySelector(s).getBoundingClientRect();
                    return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth + 1; }""",
        selector,
    )


def test_a_phone_opens_today_and_a_desktop_the_week(sales: dict[str, Any], browser_page: Any) -> None:
    page, base, calendar = browser_page, sales["base"], sales["calendar"]
    today = datetime.now(UTC).date()
    csp_violations = watch_csp_violations(page)
    sign_in(page, sales["owner"], base)
    url = f"{base}/w/acme/calendars/{calendar.public_id}"

    page.set_viewport_size(PHONE)
    page.goto(url)
    page.wait_for_url("**view=day**")
    columns = page.get_by_test_id("day-column")
    expect(columns).to_have_count(1)
    expect(columns).to_have_attribute("data-day", today.isoformat())
    assert visible_in_viewport(page, ".timeline-col.today")
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    # One "View" button in place of the three switches; it shows them, and they lead to the week.
    switches = page.locator("#cal-switches")
    expect(switches).to_be_hidden()
    menu = page.get_by_test_id("view-menu")
    expect(menu).to_contain_text("Day")
    assert visible_in_viewport(page, '[data-testid="view-menu"]')
    screenshot(page, "calendar-phone-day")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(switches).to_be_visible()
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    screenshot(page, "calendar-phone-view-open")
    page.get_by_test_id("view-week").click()
    page.wait_for_url("**view=week**")
    # A week chosen on purpose stays a week, scrolled sideways (inside its box) to today's column.
    expect(page.get_by_test_id("day-column")).to_have_count(7)
    assert visible_in_viewport(page, ".timeline-col.today")
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")

    page.set_viewport_size(DESKTOP)
    page.goto(url)
    expect(page.get_by_test_id("day-column")).to_have_count(7)
    assert "view=" not in page.url
    expect(page.get_by_test_id("view-menu")).to_be_hidden()
    expect(page.locator("#cal-switches")).to_be_visible()
    expect(page.get_by_test_id("view-day")).to_be_visible()
    assert visible_in_viewport(page, ".timeline-col.today")
    assert csp_violations == []


def test_a_bookings_label_turns_from_bumpable_to_frozen_in_one_step(
    sales: dict[str, Any], browser_page: Any
) -> None:
    page, base, calendar = browser_page, sales["base"], sales["calendar"]
    day = (datetime.now(UTC) + timedelta(days=1)).date()
    start = datetime.combine(day, time(10), tzinfo=UTC)
    csp_violations = watch_csp_violations(page)
    sign_in(page, sales["owner"], base)
    booking = booking_create(
        actor=sales["agent"], calendar=calendar, span=Span(start, start + timedelta(hours=1)), title="Demo"
    ).primary

    page.goto(f"{base}/w/acme/calendars/{calendar.public_id}?view=day&date={day.isoformat()}")
    block = page.locator(f'a.block[data-reservation="{booking.booking_id}"]')
    label = block.get_by_test_id("block-label")
    expect(label).to_contain_text("bumpable for")
    # Every text the label shows, as it changes, until it reads "frozen" and a poll has brought the server's
    # own label (the timeline polls every few seconds).
    page.evaluate(
        """(id) => {
            window.seen = [];
            const selector = `a.block[data-reservation="${id}"] [data-testid=block-label]`;
            const record = () => {
                const label = document.querySelector(selector);
                if (label) window.seen.push(label.textContent.replace(/\\s+/g, " ").trim());
            };
            record();
            const changes = {subtree: true, childList: true, characterData: true};
            new MutationObserver(record).observe(document.getElementById("timeline-live"), changes);
        }""",
        booking.booking_id,
    )
    expect(label).to_have_text("frozen", timeout=10_000)
    expect(block).to_have_class(re.compile(r"\bfrozen\b"))
    clock.sleep(6)  # one poll later the server says the same
    expect(label).to_have_text("frozen")
    seen = page.evaluate("window.seen")
    assert any("bumpable for" in text for text in seen)
    assert not [text for text in seen if "bumpable" in text and "frozen" in text], seen
    assert not [text for text in seen if "lapsed" in text or text.endswith("for")], seen
    assert csp_violations == []
