"""In real Chromium: a dashboard form sent back with its errors shows them with what was typed, and a reload
then opens the page with GET, at the page's own address, instead of sending the form again."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.helpers import acme_owner_and_agent, sign_in, watch_csp_violations
from workspaces.models import Agent

pytestmark = pytest.mark.slow


def test_a_reload_after_a_refused_form_fetches_the_page_and_posts_nothing(
    live_server: Any, browser_page: Any, transactional_db: Any, settings: Any
) -> None:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, agent = acme_owner_and_agent()
    page = browser_page
    csp_violations = watch_csp_violations(page)
    documents: list[tuple[str, str]] = []
    page.on(
        "request",
        lambda request: (
            documents.append((request.method, request.url)) if request.resource_type == "document" else None
        ),
    )
    sign_in(page, owner, base)
    agent_page = f"{base}/w/acme/agents/{agent.public_id}"
    page.goto(agent_page)

    # The priority form posts to …/priority; refused, the page comes back with the error and the value typed.
    page.locator("#p-priority").fill("100000")
    page.get_by_role("button", name="Save priority").click()
    priority_card = page.get_by_test_id("priority-edit")
    expect(priority_card.locator(".field-error").first).to_be_visible()
    expect(page.locator("#p-priority")).to_have_value("100000")
    assert documents[-1][0] == "POST" and documents[-1][1].endswith("/priority")
    expect(page).to_have_url(agent_page)  # the address bar no longer holds the POST

    documents.clear()
    page.reload()
    expect(page.get_by_role("heading", name="SDR bot", level=1)).to_be_visible()
    assert documents == [("GET", agent_page)]
    expect(priority_card.locator(".field-error")).to_have_count(0)
    assert Agent.objects.get(pk=agent.pk).priority == 100

    # A form that posts to its own page's address (a new agent on the agents list): the same.
    agents = f"{base}/w/acme/agents"
    page.goto(agents)
    page.get_by_role("button", name="Create agent").click()
    expect(page.locator(".field-error, .error").first).to_be_visible()
    documents.clear()
    page.reload()
    page.wait_for_load_state("load")
    assert documents == [("GET", agents)]
    assert Agent.objects.count() == 1
    assert csp_violations == []
