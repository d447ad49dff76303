"""Agents write titles and calendar names, and nothing stops one from being a single 300-letter word: where
the dashboard says them in a sentence (the getting-started guide's "It's there", the flash after a
decision) the word wraps in its box, and the page never scrolls sideways, on a phone or a desktop."""

from __future__ import annotations

from datetime import time
from typing import Any

import pytest

from approvals.services import approval_request
from bookings.engine import calendar_create, hold_create
from tests.dashboard.pages_helpers import future_day, span_on
from tests.e2e.helpers import DESKTOP, PHONE, acme_owner_and_agent, overflow, screenshot, sign_in
from workspaces.actor import Actor
from workspaces.keys import api_key_create

pytestmark = pytest.mark.slow

TITLE = "T" * 300
CALENDAR_NAME = "C" * 200
AGENT_NAME = "A" * 200


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_an_unbroken_title_wraps_in_the_guide_and_in_the_flash(
    live_server: Any, browser_page: Any, transactional_db: Any, settings: Any, viewport: dict[str, int]
) -> None:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, agent = acme_owner_and_agent()
    api_key_create(agent=agent, scopes=["calendars:write", "bookings:write"])
    as_agent = Actor(workspace=workspace, agent=agent)
    calendar = calendar_create(actor=as_agent, name=CALENDAR_NAME, timezone="UTC")
    hold = hold_create(
        actor=as_agent, calendar=calendar, span=span_on(future_day(), time(14)), title=TITLE
    ).primary
    approval = approval_request(actor=as_agent, summary="Book it", evidence={}, hold_id=hold.hold_id)
    page = browser_page
    page.set_viewport_size(viewport)
    sign_in(page, owner, base)
    width = viewport["width"]

    page.goto(f"{base}/w/acme/start")
    page.get_by_test_id("see-it").wait_for()
    screenshot(page, f"long-words-guide-{width}")
    assert overflow(page) == ""

    page.goto(f"{base}/w/acme/approvals/{approval.public_id}")
    page.get_by_test_id("approve").click()
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url(f"{base}/w/acme/approvals")
    assert TITLE in page.locator(".flash").inner_text()
    screenshot(page, f"long-words-flash-{width}")
    assert overflow(page) == ""


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_an_unbroken_agent_name_wraps_where_the_dashboard_names_the_agent(
    live_server: Any, browser_page: Any, transactional_db: Any, settings: Any, viewport: dict[str, int]
) -> None:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, agent = acme_owner_and_agent()
    agent.name = AGENT_NAME
    agent.save(update_fields=["name"])
    as_agent = Actor(workspace=workspace, agent=agent)
    approval = approval_request(actor=as_agent, summary="Send the quote", evidence={})
    page = browser_page
    page.set_viewport_size(viewport)
    sign_in(page, owner, base)
    width = viewport["width"]

    page.goto(f"{base}/w/acme/approvals/{approval.public_id}")
    page.get_by_test_id("approve").click()
    page.get_by_test_id("confirm-approve").wait_for()
    screenshot(page, f"long-name-decision-{width}")
    assert overflow(page) == ""

    page.goto(f"{base}/w/acme/agents/{agent.public_id}?confirm=pause")
    page.get_by_test_id("confirm-pause").wait_for()
    screenshot(page, f"long-name-pause-{width}")
    assert overflow(page) == ""

    page.goto(f"{base}/w/acme/start")
    screenshot(page, f"long-name-guide-{width}")
    assert overflow(page) == ""
