"""The calendar rules editor in real Chromium, on a desktop (1280 px) and a phone (390 px): the browser's
time zone is suggested for a calendar not set up yet, rows are added in the page, Monday is copied to
the weekdays, a date override and the buffers are set, the preview follows the unsaved form, and Save
stores it — with no sideways scroll, no script error and no Content-Security-Policy refusal.
Screenshots of both widths go to test-artifacts/ (or $RULES_SHOTS_DIR)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from accounts.models import Membership, Role
from bookings.models import Calendar
from tests.e2e.helpers import ARTIFACTS, DESKTOP, PHONE, open_context, overflow, sign_in
from workspaces.models import Workspace

pytestmark = pytest.mark.slow

SHOTS = Path(os.environ.get("RULES_SHOTS_DIR", ARTIFACTS))


@pytest.mark.parametrize(("viewport", "zone"), [(DESKTOP, "Europe/Berlin"), (PHONE, "America/New_York")])
def test_an_owner_sets_up_a_calendars_rules_in_the_browser(
    live_server: Any,
    dashboard_settings: Any,
    chromium_context_factory: Any,
    transactional_db: Any,
    viewport: dict[str, int],
    zone: str,
) -> None:
    base = dashboard_settings.DASHBOARD_BASE_URL
    workspace = Workspace.objects.create(slug="acme", name="Acme Inc.")
    owner = get_user_model().objects.create_user(username="olivia@acme.test", email="olivia@acme.test")
    Membership.objects.create(user=owner, workspace=workspace, role=Role.OWNER)
    calendar = Calendar.objects.create(workspace=workspace, name="Support rota")  # UTC, no rules yet
    context, page, failures = open_context(chromium_context_factory, viewport)
    page.on("console", lambda m: failures.append(f"console: {m.text}") if m.type == "error" else None)
    page.context.new_cdp_session(page).send("Emulation.setTimezoneOverride", {"timezoneId": zone})
    sign_in(page, owner, base)

    page.goto(f"{base}/w/acme/calendars/{calendar.public_id}/settings")

    # The browser's zone is filled in, and said so; nothing is saved until Save.
    assert page.locator("#c-timezone").input_value() == zone
    assert page.locator("[data-zone-note]").is_visible()
    assert Calendar.objects.get(pk=calendar.pk).timezone == "UTC"
    # "Open at any time" is the choice of a calendar without hours: the week is hidden until asked for.
    assert page.get_by_test_id("hours-any").is_checked()
    assert not page.locator("[data-week]").is_visible()
    page.get_by_test_id("hours-weekly").check()
    monday = page.get_by_test_id("day-mon")
    assert monday.locator("[data-interval]").count() == 1

    monday.get_by_role("button", name="+ Add time").click()
    assert monday.locator("[data-interval]").count() == 2
    starts, ends = monday.locator('input[name="mon-start"]'), monday.locator('input[name="mon-end"]')
    assert (starts.nth(1).input_value(), ends.nth(1).input_value()) == ("17:00", "18:00")  # follows on
    ends.nth(0).fill("12:30")
    starts.nth(1).fill("13:30")
    ends.nth(1).fill("17:00")
    page.get_by_role("button", name="Copy Monday to Tuesday–Friday").click()
    assert page.get_by_test_id("day-fri").locator('input[name="fri-start"]').count() == 2
    page.get_by_test_id("day-sat").locator("[data-day-open]").check()  # Saturday mornings
    page.locator('input[name="sat-end"]').fill("12:00")

    page.get_by_role("button", name="+ Add a date").click()
    page.locator('input[name="ov-0-date"]').fill("2026-12-24")  # left unticked: closed
    page.get_by_label("Buffer after").fill("15")
    page.get_by_label("Minimum notice").fill("120")

    # The preview follows the form as it stands, before anything is saved.
    preview = page.get_by_test_id("rules-preview")
    preview.get_by_text("13:30–17:00").first.wait_for()
    assert preview.get_by_test_id("preview-unsaved").is_visible() and f"in {zone}" in preview.inner_text()
    page.wait_for_load_state("networkidle")

    too_wide = overflow(page)
    assert not too_wide, too_wide
    assert page.evaluate("() => document.scrollingElement.scrollWidth <= innerWidth")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"rules-editor-{viewport['width']}.png"), full_page=True)

    page.get_by_test_id("calendar-settings-submit").click()
    page.wait_for_url("**/settings")
    saved_notice = "Saved: time zone, working hours, date overrides, buffer after, minimum notice."
    assert saved_notice in page.inner_text("main")
    saved = Calendar.objects.get(pk=calendar.pk)
    office = [["09:00", "12:30"], ["13:30", "17:00"]]
    assert saved.timezone == zone
    assert saved.working_hours == {
        "mon": office,
        "tue": office,
        "wed": office,
        "thu": office,
        "fri": office,
        "sat": [["09:00", "12:00"]],
        "sun": [],
    }
    assert saved.date_overrides == {"2026-12-24": []}
    assert (saved.buffer_after_minutes, saved.min_notice_minutes) == (15, 120)
    # The preview follows the saved rules, in the calendar's zone; the saved zone is no longer replaced.
    assert page.get_by_test_id("preview-day").count() == 7
    assert f"in {zone}" in preview.inner_text() and preview.get_by_test_id("preview-unsaved").count() == 0
    assert page.locator("[data-zone-note]").count() == 0
    too_wide = overflow(page)
    assert not too_wide, too_wide
    page.screenshot(path=str(SHOTS / f"rules-saved-{viewport['width']}.png"), full_page=True)
    assert not failures, failures
    context.close()
