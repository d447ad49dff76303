"""End to end in real Chromium, as a viewer and as an approver: every signed-in page keeps the workspace's
navigation (the account's passkeys too), the Team page is in it and read-only for them, a page their role
may not open says why, who can change that and how to get back, and a form sent without its CSRF cookie
gets a page with a way back instead of Django's bare one."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership, Role
from tests.e2e.helpers import screenshot, watch_csp_violations
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


def seed() -> dict[str, Any]:
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    people = {}
    for email, first, last, role in [
        ("olivia@acme.test", "Olivia", "Owens", Role.OWNER),
        ("oscar@acme.test", "", "", Role.OWNER),
        ("adam@acme.test", "Adam", "Admin", Role.ADMIN),
        ("april@acme.test", "April", "Park", Role.APPROVER),
        ("vic@acme.test", "Vic", "Viewer", Role.VIEWER),
    ]:
        user = get_user_model().objects.create_user(
            username=email, email=email, first_name=first, last_name=last
        )
        Membership.objects.create(user=user, workspace=workspace, role=role)
        people[role if role != Role.OWNER or first else "second_owner"] = user
    agent = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=100
    )
    return {"workspace": workspace, "agent": agent, **people}


def signed_in_page(chromium_context_factory: Any, base: str, user: Any) -> Any:
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
    page.set_default_timeout(15_000)
    return page


def nav(page: Any) -> Any:
    return page.get_by_role("navigation", name="Workspace")


@pytest.mark.parametrize(("role", "article"), [(Role.VIEWER, "a viewer"), (Role.APPROVER, "an approver")])
def test_a_member_who_cannot_manage_finds_the_nav_everywhere_a_read_only_team_and_refusals_that_lead_back(
    live_server, dashboard_settings, chromium_context_factory, transactional_db, role, article
):
    base = dashboard_settings.DASHBOARD_BASE_URL
    people = seed()
    page = signed_in_page(chromium_context_factory, base, people[role])
    violations = watch_csp_violations(page)

    # The account's passkeys page keeps the workspace's navigation, and Team is in it.
    page.goto(f"{base}/auth/passkeys")
    assert page.get_by_role("heading", name="Passkeys").is_visible()
    assert nav(page).get_by_role("link", name="Approvals").is_visible()
    assert page.get_by_test_id("your-role-link").inner_text() == role
    screenshot(page, f"passkeys-with-nav-{role}")
    nav(page).get_by_role("link", name="Team", exact=True).click()
    page.wait_for_url(f"{base}/w/acme/team")
    assert page.get_by_test_id("your-role").inner_text().startswith(f"You are {article} in Acme")
    assert nav(page).get_by_role("link", name="Team", exact=True).get_attribute("aria-current") == "page"
    assert page.get_by_test_id("roles-explainer").is_visible()
    # Read-only: no invitations, no role changes, no removing others; only leaving.
    assert page.get_by_test_id("invite-form").count() == 0 and page.get_by_test_id("role-select").count() == 0
    assert page.get_by_test_id("invitation-table").count() == 0
    assert page.get_by_role("button", name="Remove").count() == 0
    assert page.get_by_role("button", name="Leave").count() == 1

    # A shared link to an agent's inbox thread: refused, with why, who can grant it and the way back.
    agent = people["agent"]
    response = page.goto(f"{base}/w/acme/agents/{agent.public_id}/inbox/thr_shared")
    assert response is not None and response.status == 403
    assert page.get_by_role("heading", name="Not allowed with your role").is_visible()
    reason = page.get_by_test_id("forbidden-reason").inner_text()
    assert reason == f"You are {article} in Acme: {article} cannot read agents' inboxes."
    grantors = page.locator(".grantors a")
    assert grantors.all_inner_texts() == ["Olivia Owens (olivia@acme.test)", "oscar@acme.test"]  # owners only
    assert grantors.first.get_attribute("href") == "mailto:olivia@acme.test"
    assert "adam@acme.test" not in page.content()  # an admin cannot change roles
    assert page.locator(".auth-card").is_visible()  # the dashboard's card, not Django's bare page
    screenshot(page, f"forbidden-{role}")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, f"forbidden-{role}-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    page.set_viewport_size({"width": 1360, "height": 860})
    page.get_by_test_id("forbidden-back").click()
    page.wait_for_url(f"{base}/w/acme/approvals")
    assert nav(page).is_visible()

    # A form whose CSRF cookie is gone (cleared, or a stale page): refused on a page that leads back.
    page.goto(f"{base}/auth/passkeys")
    page.context.clear_cookies(name=settings.CSRF_COOKIE_NAME)
    page.get_by_role("button", name="Sign out", exact=True).click()
    page.get_by_test_id("csrf-failure").wait_for()
    assert page.get_by_role("heading", name="This page was out of date").is_visible()
    assert "Nothing was changed" in page.get_by_test_id("csrf-failure").inner_text()
    screenshot(page, f"csrf-failure-{role}")
    page.get_by_test_id("csrf-back").click()
    page.wait_for_url(f"{base}/auth/passkeys")
    assert page.get_by_test_id("your-role-link").inner_text() == role  # still signed in: nothing changed
    assert not violations
    page.context.close()
