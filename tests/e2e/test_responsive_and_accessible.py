"""Every dashboard page in real Chromium, on a phone (390 px) and a desktop (1280 px): nothing scrolls
the page sideways, axe-core finds no serious or critical accessibility problem, no request fails, and
the layout's own controls (skip link, menu button) work from the keyboard.

One workspace with a little of everything is seeded once; each width gets one browser context that
walks all the pages. `-m screenshots` writes the README's tour pictures (docs/img) from the same pages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from PIL import Image

from accounts.models import Membership, Passkey, Role
from agentcal.errors import SlotConflict
from approvals.services import approval_request
from audit.models import AuditRecord
from bookings.engine import booking_create, calendar_create, hold_create, hold_release
from bookings.spans import Span
from inboxes.addresses import agent_address
from tests.e2e.axe import axe_violations, describe
from tests.e2e.helpers import DESKTOP, PHONE, open_context, overflow, sign_in
from tests.inboxes.helpers import deliver_raw, mail
from workspaces.actor import Actor
from workspaces.keys import api_key_create
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow

TOUR_IMG = Path(__file__).resolve().parents[2] / "docs" / "img" / "tour"


@dataclass
class Tour:
    owner: Any
    pages: list[tuple[str, str]]  # (name, path), the signed-in pages


def seed_tour() -> Tour:
    """A workspace with a little of everything: agents with keys, calendars with holds, bookings, a
    release and a conflict (so the audit trail and metrics have rows), approvals (one gating a hold),
    mail in an inbox and a passkey."""
    # Defaults of the workspace's own for the request rate (the tests' installation default is far above a
    # real one), and a limit of the sales agent's own: the agent's page shows all three origins.
    workspace = Workspace.objects.create(
        slug="acme", name="Acme Inc.", limit_requests_per_second=20, limit_request_burst=60
    )
    owner = get_user_model().objects.create_user(username="olivia@acme.test", email="olivia@acme.test")
    Membership.objects.create(user=owner, workspace=workspace, role=Role.OWNER)
    Passkey.objects.create(
        user=owner,
        name="Olivia's laptop",
        credential_id=b"tour-passkey",
        public_key=b"-",
        transports=["internal"],
    )
    sdr = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=200, limit_live_holds=25
    )
    assistant = Agent.objects.create(
        workspace=workspace, name="Exec assistant", slug="exec-assistant", priority=500, max_priority=900
    )
    api_key_create(
        agent=sdr, scopes=["calendars:write", "bookings:read", "bookings:write"], name="production"
    )
    api_key_create(agent=assistant, scopes=["approvals:read", "approvals:write"], name="laptop")
    as_sdr = Actor(workspace=workspace, agent=sdr)
    as_assistant = Actor(workspace=workspace, agent=assistant)

    sales = calendar_create(actor=as_sdr, name="Sales team", timezone="Europe/Berlin", hold_ttl_seconds=3600)
    calendar_create(actor=as_assistant, name="Executive office", timezone="America/New_York")
    day = (datetime.now(UTC) + timedelta(days=2)).date()

    def span(hour: int, minutes: int = 30) -> Span:
        start = datetime.combine(day, time(hour), tzinfo=UTC)
        return Span(start, start + timedelta(minutes=minutes))

    booking_create(
        actor=as_assistant,
        calendar=sales,
        span=span(9, 60),
        title="Quarterly board prep",
        attendees=[{"email": "dana@customer.example", "name": "Dana Whitfield"}],
    )
    intro = hold_create(actor=as_sdr, calendar=sales, span=span(11), title="Intro call with Dana (ACME)")
    with pytest.raises(SlotConflict):  # a refused hold, for the audit trail and the metrics
        hold_create(actor=as_sdr, calendar=sales, span=span(11), title="Intro call again")
    released = hold_create(actor=as_sdr, calendar=sales, span=span(14), title="Follow-up demo")
    hold_release(actor=as_sdr, hold_id=released.primary.hold_id, hold_token=released.hold_token or "")
    hold_create(actor=as_sdr, calendar=sales, span=span(15, 45), title="Pricing walkthrough")

    gated = approval_request(
        actor=as_sdr,
        summary="Book a 30-minute intro with Dana (ACME) on Tuesday",
        evidence={"thread": ["Can we meet Tuesday?", "Tuesday 11:00 works for me."], "lead_score": 0.92},
        hold_id=intro.primary.hold_id,
    )
    approval_request(
        actor=as_assistant,
        summary="Send the signed proposal to the customer's procurement team",
        evidence={"to": "procurement@customer.example", "attachments": ["proposal-v3.pdf"]},
    )

    address = agent_address(sdr)
    (first,) = deliver_raw(
        mail(address, subject="Pricing for 25 seats", message_id="pricing@customer.example").as_bytes(),
        [address],
    )
    deliver_raw(
        mail(
            address,
            subject="Re: Intro call on Tuesday",
            body="Tuesday at 11:00 works for me. Talk soon,\nDana\n",
            sender="Dana Whitfield <dana@customer.example>",
        ).as_bytes(),
        [address],
    )

    refused = AuditRecord.objects.filter(workspace_id=workspace.pk, outcome="rejected").first()
    assert refused is not None
    slug = workspace.slug
    pages = [
        ("approvals", f"/w/{slug}/approvals"),
        ("approval-detail", f"/w/{slug}/approvals/{gated.public_id}"),
        ("calendars", f"/w/{slug}/calendars"),
        ("calendar-week", f"/w/{slug}/calendars/{sales.public_id}?view=week&date={day.isoformat()}"),
        # No view named: a phone opens the day (the page replaces itself), a desktop the week.
        ("calendar", f"/w/{slug}/calendars/{sales.public_id}"),
        ("calendar-settings", f"/w/{slug}/calendars/{sales.public_id}/settings"),
        ("audit-trail", f"/w/{slug}/audit"),
        ("audit-filtered", f"/w/{slug}/audit?event_type=calendar.hold.*&outcome=rejected"),
        ("audit-record", f"/w/{slug}/audit?record={refused.public_id}"),
        ("metrics", f"/w/{slug}/metrics"),
        ("agents", f"/w/{slug}/agents"),
        ("agent-detail", f"/w/{slug}/agents/{sdr.public_id}"),
        ("inboxes", f"/w/{slug}/inboxes"),
        ("agent-inbox", f"/w/{slug}/agents/{sdr.public_id}/inbox"),
        ("inbox-thread", f"/w/{slug}/agents/{sdr.public_id}/inbox/{first.thread.public_id}"),
        ("mail-setup", f"/w/{slug}/settings/mail"),
        ("limit-defaults", f"/w/{slug}/settings/limits"),
        ("passkeys", "/auth/passkeys"),
        ("team", f"/w/{slug}/team"),
    ]
    return Tour(owner=owner, pages=pages)


def check_page(page: Any, base: str, name: str, path: str, width: int) -> list[str]:
    page.goto(base + path)
    page.wait_for_load_state("load")
    if name == "calendar" and width < 600:
        page.wait_for_url("**view=day**")  # a phone's calendar replaces itself with today's day
        page.wait_for_load_state("load")
    problems = []
    too_wide = overflow(page)
    if too_wide:
        problems.append(f"{name} at {width} px scrolls sideways: {too_wide}")
    violations = axe_violations(page)
    if violations:
        problems.append(f"{name} at {width} px, axe:\n{describe(violations)}")
    return problems


def test_every_page_fits_a_phone_and_a_desktop_and_axe_finds_nothing_serious(
    live_server: Any, dashboard_settings: Any, chromium_context_factory: Any, transactional_db: Any
) -> None:
    base = dashboard_settings.DASHBOARD_BASE_URL
    tour = seed_tour()
    problems: list[str] = []
    for viewport in (PHONE, DESKTOP):
        context, page, failures = open_context(chromium_context_factory, viewport)
        problems += check_page(page, base, "sign-in", "/auth/sign-in", viewport["width"])
        sign_in(page, tour.owner, base)
        for name, path in tour.pages:
            problems += check_page(page, base, name, path, viewport["width"])
        problems += [f"at {viewport['width']} px: {failure}" for failure in failures]
        context.close()
    assert not problems, "\n".join(problems)


def test_the_skip_link_and_the_menu_button_work_from_the_keyboard(
    live_server: Any, dashboard_settings: Any, chromium_context_factory: Any, transactional_db: Any
) -> None:
    base = dashboard_settings.DASHBOARD_BASE_URL
    tour = seed_tour()
    context, page, failures = open_context(chromium_context_factory, PHONE)
    sign_in(page, tour.owner, base)
    page.goto(f"{base}/w/acme/audit")
    menu = page.get_by_role("button", name="Menu")
    nav = page.get_by_role("navigation", name="Workspace")

    # The first Tab reaches the skip link, which shows itself and jumps past the navigation.
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    assert page.evaluate("() => document.activeElement.textContent.trim()") == "Skip to content"
    assert skip.is_visible()
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "content"
    page.keyboard.press("Tab")  # the next stop is in the page, not in the menu
    assert page.evaluate("() => !!document.activeElement.closest('#content')")

    # On a phone the navigation hides behind the menu button until asked for.
    assert menu.is_visible() and not nav.is_visible()
    assert menu.get_attribute("aria-expanded") == "false"
    menu.focus()
    page.keyboard.press("Enter")
    assert menu.get_attribute("aria-expanded") == "true" and nav.is_visible()
    assert (
        page.evaluate("() => document.activeElement.closest('nav')?.getAttribute('aria-label')")
        == "Workspace"
    )
    # Escape closes it and gives the focus back to the button.
    page.keyboard.press("Escape")
    assert menu.get_attribute("aria-expanded") == "false" and not nav.is_visible()
    assert page.evaluate("() => document.activeElement.getAttribute('aria-controls')") == "sidebar-menu"

    # On a desktop the navigation is simply there, and the button is not.
    page.set_viewport_size(DESKTOP)
    assert nav.is_visible() and not menu.is_visible()
    assert not failures, failures
    context.close()


def test_a_viewers_pages_and_refusals_fit_a_phone_and_a_desktop_and_axe_finds_nothing_serious(
    live_server: Any, dashboard_settings: Any, chromium_context_factory: Any, transactional_db: Any
) -> None:
    """A viewer's own states: the passkeys page in the workspace shell, the read-only team, a page their
    role may not open (403) and a form refused for its missing CSRF cookie."""
    base = dashboard_settings.DASHBOARD_BASE_URL
    tour = seed_tour()
    viewer = get_user_model().objects.create_user(username="vic@acme.test", email="vic@acme.test")
    Membership.objects.create(user=viewer, workspace=Workspace.objects.get(slug="acme"), role=Role.VIEWER)
    refused = "/w/acme/inboxes"
    problems: list[str] = []
    for viewport in (PHONE, DESKTOP):
        width = viewport["width"]
        context, page, failures = open_context(chromium_context_factory, viewport)
        sign_in(page, viewer, base)
        for name, path in [("viewer-passkeys", "/auth/passkeys"), ("viewer-team", "/w/acme/team")]:
            problems += check_page(page, base, name, path, width)
        problems += check_page(page, base, "forbidden", refused, width)
        page.goto(f"{base}/auth/passkeys")
        context.clear_cookies(name=settings.CSRF_COOKIE_NAME)
        page.get_by_role("button", name="Sign out everywhere").click()  # in the page at any width
        page.get_by_test_id("csrf-failure").wait_for()
        if too_wide := overflow(page):
            problems.append(f"csrf-failure at {width} px scrolls sideways: {too_wide}")
        if violations := axe_violations(page):
            problems.append(f"csrf-failure at {width} px, axe:\n{describe(violations)}")
        # The two refusals answer 403 by design; anything else failing is a problem.
        expected = {f"403 {base}{refused}", f"403 {base}/auth/sign-out-everywhere"}
        problems += [f"at {width} px: {failure}" for failure in failures if failure not in expected]
        context.close()
    assert tour.owner and not problems, "\n".join(problems)


def test_the_favicon_is_linked_from_every_page_and_served(client: Any, db: Any) -> None:
    html = client.get("/auth/sign-in").content.decode()
    linked = re.findall(r'<link rel="(?:icon|apple-touch-icon)" href="([^"]+)"', html)
    assert len(linked) == 3, html
    # Browsers ask for /favicon.ico whatever a page links: it answers too, where the static file is.
    legacy = client.get("/favicon.ico")
    assert legacy.status_code == 301
    for url in [*linked, legacy["Location"]]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert response["Content-Type"].startswith("image/"), (url, response["Content-Type"])
        assert b"".join(response.streaming_content if response.streaming else [response.content])


@pytest.mark.screenshots
def test_tour_screenshots_for_the_readme(
    live_server: Any, dashboard_settings: Any, chromium_context_factory: Any, transactional_db: Any
) -> None:
    """Writes docs/img/tour/<page>-<desktop|phone>.png, the README's tour: run `pytest -m screenshots`
    after the pages change. What the screen shows (no full-page strips), in at most 256 colours."""
    base = dashboard_settings.DASHBOARD_BASE_URL
    tour = seed_tour()
    TOUR_IMG.mkdir(parents=True, exist_ok=True)

    def shoot(page: Any, name: str) -> None:
        path = TOUR_IMG / f"{name}.png"
        page.screenshot(path=str(path), animations="disabled", caret="hide")
        Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)

    for viewport, suffix in ((DESKTOP, "desktop"), (PHONE, "phone")):
        context, page, _ = open_context(chromium_context_factory, viewport)
        page.goto(f"{base}/auth/sign-in")
        shoot(page, f"sign-in-{suffix}")
        sign_in(page, tour.owner, base)
        for name, path in tour.pages:
            page.goto(base + path)
            page.wait_for_load_state("load")
            shoot(page, f"{name}-{suffix}")
        if viewport is PHONE:
            page.get_by_role("button", name="Menu").click()
            shoot(page, "menu-phone")
        context.close()
