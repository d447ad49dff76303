"""Two people on one approval in real Chromium: one decides (confirming first), the other's open page turns
into "Approved by …" and their badge and tab title count down, without a reload."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from accounts.models import Membership, Role
from approvals.services import approval_request
from bookings.engine import calendar_create, hold_create
from bookings.spans import Span
from tests.e2e.helpers import screenshot, watch_csp_violations
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


def browser_for(chromium_context_factory: Any, base: str, user: Any, width: int = 1280) -> Any:
    """A browser signed in as `user` (a session made by Django: passkey sign-in has its own tests)."""
    client = Client()
    client.force_login(user)
    context = chromium_context_factory()
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": base,
            }
        ]
    )
    page = context.pages[0] if context.pages else context.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.set_default_timeout(12_000)
    return page


def test_one_person_decides_and_the_others_open_page_badge_and_title_follow(
    live_server, transactional_db, chromium_context_factory, django_user_model, settings
):
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    olivia = django_user_model.objects.create_user(username="olivia@acme.test", email="olivia@acme.test")
    adam = django_user_model.objects.create_user(username="adam@acme.test", email="adam@acme.test")
    Membership.objects.create(user=olivia, workspace=workspace, role=Role.OWNER)
    Membership.objects.create(user=adam, workspace=workspace, role=Role.ADMIN)
    sdr = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=100
    )
    agent = Actor(workspace=workspace, agent=sdr)
    calendar = calendar_create(actor=agent, name="Sales team", timezone="Europe/Berlin")
    start = datetime.combine(datetime.now(UTC).date() + timedelta(days=2), time(13, 0), tzinfo=UTC)
    hold = hold_create(
        actor=agent,
        calendar=calendar,
        span=Span(start, start + timedelta(minutes=30)),
        title="Intro call with Dana",
        attendees=["dana@acme.test"],
    ).primary
    gated = approval_request(
        actor=agent,
        summary="Book the intro call with Dana on Tuesday",
        evidence={"why": "Dana asked for Tuesday afternoon", "thread": ["Can we meet Tuesday?", "Yes, 2pm"]},
        hold_id=hold.hold_id,
    )
    approval_request(actor=agent, summary="Send the renewal quote", evidence={"amount": 1200})
    url = f"{base}/w/acme/approvals/{gated.public_id}"

    watcher = browser_for(chromium_context_factory, base, olivia)
    csp_violations = watch_csp_violations(watcher)
    watcher.goto(url)
    assert watcher.title().startswith("(2) Book the intro call")
    assert watcher.get_by_test_id("pending-badge").inner_text().startswith("2")
    assert watcher.get_by_test_id("approve").is_visible()
    screenshot(watcher, "approval-gated-desktop")
    watcher.evaluate("() => { window.notReloaded = true; }")

    decider = browser_for(chromium_context_factory, base, adam, width=390)
    decider.goto(url)
    screenshot(decider, "approval-gated-phone")
    decider.get_by_label("Note to the agent").fill("Go ahead")
    decider.get_by_test_id("approve").click()
    # The confirm step says what approving does; nothing is decided yet.
    confirm = decider.get_by_test_id("confirm-step")
    confirm.wait_for()
    assert "becomes a booking on Sales team" in confirm.inner_text()
    assert decider.get_by_label("Note to the agent").input_value() == "Go ahead"
    screenshot(decider, "approval-confirm-phone")
    gated.refresh_from_db()
    assert gated.status == "pending"
    decider.get_by_test_id("confirm-approve").click()
    decider.wait_for_url(f"{base}/w/acme/approvals")
    assert decider.locator(".flash").inner_text().startswith("Booked Intro call with Dana on Sales team, ")

    # The watcher's page follows by itself: the decision card, the status, the badge and the title.
    line = watcher.get_by_test_id("decision-line")
    line.wait_for()
    assert re.search(
        r"Approved by adam@acme\.test at \w{3} \d+ \w{3} \d{4}, \d\d:\d\d UTC", line.inner_text()
    )
    assert watcher.get_by_test_id("approve").count() == 0
    assert watcher.get_by_test_id("approval-status").get_attribute("data-status") == "approved"
    watcher.wait_for_function("() => document.title.startsWith('(1) ')")
    assert watcher.get_by_test_id("pending-badge").inner_text().startswith("1")
    watcher.get_by_test_id("booking-made").wait_for()
    assert watcher.evaluate("() => window.notReloaded") is True
    screenshot(watcher, "approval-decided-desktop")
    assert csp_violations == []
