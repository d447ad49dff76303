"""Destructive dashboard forms ask in the page, as approving and cancelling do, never with the browser's
own confirm() dialog: disabling an agent and revoking its key, from a desktop and a phone."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.helpers import acme_owner_and_agent, screenshot, sign_in, watch_csp_violations
from workspaces.keys import api_key_create, verified_keys
from workspaces.models import Agent, ApiKey

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 860}, {"width": 390, "height": 844}])
def test_disable_and_revoke_confirm_in_the_page(
    live_server: Any,
    browser_page: Any,
    transactional_db: Any,
    settings: Any,
    viewport: dict[str, int],
) -> None:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, agent = acme_owner_and_agent()
    key, _ = api_key_create(agent=agent, scopes=["calendars:read"])
    page = browser_page
    page.set_viewport_size(viewport)
    dialogs: list[str] = []

    def refuse(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    csp_violations = watch_csp_violations(page)
    sign_in(page, owner, base)
    page.goto(f"{base}/w/acme/agents/{agent.public_id}")

    # Disable: the form steps aside for the question; Escape keeps the agent and gives the focus back.
    disable = page.get_by_role("button", name="Disable agent")
    disable.click()
    confirm = page.get_by_test_id("inline-confirm")
    expect(confirm).to_contain_text("Disable SDR bot? Every request with its keys is refused at once")
    expect(confirm.locator("p")).to_be_focused()
    expect(disable).to_be_hidden()
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    screenshot(page, f"inline-confirm-disable-{viewport['width']}")
    page.keyboard.press("Escape")
    expect(confirm).to_have_count(0)
    expect(disable).to_be_focused()
    assert Agent.objects.get(pk=agent.pk).is_active

    disable.click()
    page.get_by_role("button", name="Yes, disable").click()
    expect(page.get_by_test_id("status-control")).to_contain_text("Disabled.")
    assert not Agent.objects.get(pk=agent.pk).is_active
    expect(page.get_by_test_id("key-status")).to_have_text("agent disabled")

    # Revoke: "Keep it" changes nothing; "Yes, revoke" revokes.
    page.get_by_role("button", name="Revoke").click()
    confirm = page.get_by_test_id("inline-confirm")
    expect(confirm).to_contain_text(f"Revoke avs_live_{key.prefix}")
    confirm.get_by_role("button", name="Keep it").click()
    expect(confirm).to_have_count(0)
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None
    page.get_by_role("button", name="Revoke").click()
    page.get_by_role("button", name="Yes, revoke").click()
    expect(page.get_by_test_id("key-status")).to_have_text("revoked")
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None

    assert dialogs == []  # never the browser's own confirm()
    assert page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
    assert csp_violations == []
    verified_keys.clear()
