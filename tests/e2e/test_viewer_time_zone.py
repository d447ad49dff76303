"""A person whose browser is in India reads every moment of an action (approvals, the audit trail, a
reservation's history, passkeys) in IST, named, with the exact UTC time on hover; the calendar's own
times stay in the calendar's zone, named too. And the calendar's time zone picker finds "Berlin"."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from accounts.models import Membership, Passkey, Profile, Role
from agentcal.moments import utc_text
from approvals.services import approval_request
from audit.models import AuditRecord
from bookings.engine import calendar_create, hold_create
from bookings.models import Calendar
from bookings.spans import Span
from tests.e2e.helpers import DESKTOP, PHONE, overflow, screenshot, sign_in, watch_csp_violations
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow

IST_TEXT = re.compile(r"\d\d:\d\d(:\d\d)? IST$")
UTC_TITLE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


def owner_of_acme() -> Any:
    workspace = Workspace.objects.create(slug="acme", name="Acme Inc.")
    owner = get_user_model().objects.create_user(username="olivia@acme.test", email="olivia@acme.test")
    Membership.objects.create(user=owner, workspace=workspace, role=Role.OWNER)
    return owner


def browser(chromium_context_factory: Any, viewport: dict[str, int], zone: str) -> tuple[Any, Any, list[str]]:
    context = chromium_context_factory(timezone_id=zone)
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(10_000)
    page.set_viewport_size(viewport)
    failures = watch_csp_violations(page)
    page.on("pageerror", lambda error: failures.append(f"script error on {page.url}: {error}"))
    page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    return context, page, failures


def assert_ist(moment: Any, utc: datetime | None = None) -> None:
    """A `<time>` in IST, named, with the exact UTC time on hover."""
    text, title = moment.inner_text().strip(), moment.get_attribute("title") or ""
    assert IST_TEXT.search(text) or text.endswith("ago"), text
    assert UTC_TITLE.search(title), title
    if text.endswith("ago"):
        assert " IST · " in title, title  # a relative time hovers the local time too
    if utc is not None:
        assert title.endswith(utc_text(utc)), (title, utc_text(utc))


def test_moments_read_in_the_browsers_zone_with_utc_on_hover(
    live_server: Any, dashboard_settings: Any, chromium_context_factory: Any, transactional_db: Any
) -> None:
    base = dashboard_settings.DASHBOARD_BASE_URL
    owner = owner_of_acme()
    workspace = Workspace.objects.get(slug="acme")
    passkey = Passkey.objects.create(user=owner, name="Laptop", credential_id=b"k", public_key=b"-")
    sdr = Agent.objects.create(workspace=workspace, name="SDR bot", slug="sdr", priority=100)
    as_sdr = Actor(workspace=workspace, agent=sdr)
    sales = calendar_create(actor=as_sdr, name="Sales team", timezone="Europe/Berlin", hold_ttl_seconds=3600)
    day = (datetime.now(UTC) + timedelta(days=2)).date()
    start = datetime.combine(day, time(9), tzinfo=UTC)
    span = Span(start, start + timedelta(minutes=30))
    hold = hold_create(actor=as_sdr, calendar=sales, span=span, title="Intro")
    approval = approval_request(actor=as_sdr, summary="Book the intro with Dana", evidence={})

    context, page, failures = browser(chromium_context_factory, DESKTOP, "Asia/Kolkata")
    sign_in(page, owner, base)

    # The first page tells the server the browser's zone; it is kept on the person's profile.
    with page.expect_response(lambda r: r.url.endswith("/auth/time-zone")) as told:
        page.goto(f"{base}/auth/passkeys")
    assert told.value.status == 204
    # Chromium's ICU still says India's zone by its older IANA name, an alias of Asia/Kolkata.
    assert Profile.objects.get(user=owner).time_zone in ("Asia/Kolkata", "Asia/Calcutta")

    page.goto(f"{base}/auth/passkeys")
    assert_ist(page.get_by_test_id("passkey-added").locator("time"), passkey.created_at)

    page.goto(f"{base}/w/acme/approvals")
    assert_ist(page.locator("table time[data-moment]").first, approval.created_at)
    page.goto(f"{base}/w/acme/approvals/{approval.public_id}")
    page.wait_for_selector("time[data-moment]")
    for moment in page.locator("main time[data-moment]").all():
        assert_ist(moment)
    screenshot(page, "time-zone-approval-ist")

    page.goto(f"{base}/w/acme/audit")
    newest = AuditRecord.objects.filter(workspace_id=workspace.pk).order_by("-timestamp").first()
    assert newest is not None
    assert_ist(page.locator(".audit-time time").first, newest.timestamp)
    screenshot(page, "time-zone-audit-ist")

    # The calendar's own times stay in Berlin, named; the drawer's history reads in IST.
    page.goto(f"{base}/w/acme/calendars/{sales.public_id}?date={day.isoformat()}")
    zone_named = page.get_by_test_id("timeline-zone").inner_text().strip()
    assert zone_named in ("CET", "CEST", "CET/CEST", "CEST/CET")
    page.goto(f"{base}/w/acme/calendars/{sales.public_id}/reservations/{hold.primary.hold_id}")
    history = page.get_by_test_id("drawer-history").locator("time")
    assert history.count() >= 1
    for i in range(history.count()):
        assert_ist(history.nth(i))
    assert "10:00" in page.get_by_test_id("drawer-local-time").inner_text()  # 09:00 UTC in Berlin (CET)
    screenshot(page, "time-zone-drawer-ist")

    assert not failures, failures
    context.close()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE])
def test_the_time_zone_picker_finds_berlin(
    live_server: Any,
    dashboard_settings: Any,
    chromium_context_factory: Any,
    transactional_db: Any,
    viewport: dict[str, int],
) -> None:
    base = dashboard_settings.DASHBOARD_BASE_URL
    owner = owner_of_acme()
    context, page, failures = browser(chromium_context_factory, viewport, "America/New_York")
    sign_in(page, owner, base)
    page.goto(f"{base}/w/acme/calendars")

    zone = page.get_by_role("combobox", name="Time zone")
    # Creating a calendar starts from the browser's own zone.
    assert zone.input_value() == "America/New_York"
    page.locator("#c-name").fill("Berlin office")
    zone.fill("")
    zone.press_sequentially("Berlin")
    options = page.get_by_role("listbox", name="Time zones").get_by_role("option")
    assert options.first.inner_text() == "Europe/Berlin"
    assert zone.get_attribute("aria-expanded") == "true"
    screenshot(page, f"time-zone-picker-{viewport['width']}")
    assert not overflow(page)
    zone.press("ArrowDown")
    zone.press("Enter")  # picks, does not submit
    assert zone.input_value() == "Europe/Berlin" and zone.get_attribute("aria-expanded") == "false"
    page.get_by_test_id("calendar-create-submit").click()
    page.wait_for_load_state("load")
    assert Calendar.objects.get(name="Berlin office").timezone == "Europe/Berlin"

    assert not failures, failures
    context.close()
