"""End to end in real Chromium: an owner invites a viewer, who joins by the emailed link, adds a passkey,
signs in with it and finds a read-only dashboard (no decisions, no keys, no team management)."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from accounts.models import Invitation, Membership, Passkey
from approvals.services import approval_request
from tests.e2e.helpers import add_passkey, add_virtual_authenticator, screenshot, watch_csp_violations
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


def test_an_owner_invites_a_viewer_who_joins_with_a_passkey_and_can_only_read(
    live_server, dashboard_settings, browser_page, chromium_context_factory, transactional_db, mailoutbox
):
    base = dashboard_settings.DASHBOARD_BASE_URL
    owner_page = browser_page
    owner_violations = watch_csp_violations(owner_page)

    # Something for the viewer to look at: an agent, and a request waiting for a decision.
    out = StringIO()
    call_command(
        "create_owner",
        "olivia@acme.test",
        "--workspace",
        "acme",
        "--workspace-name",
        "Acme",
        stdout=out,
        stderr=StringIO(),
    )
    workspace = Workspace.objects.get(slug="acme")
    agent = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=100
    )
    approval = approval_request(
        actor=Actor(workspace=workspace, agent=agent),
        summary="Book an intro with Dana",
        evidence={"why": "asked"},
    )

    # 1. The owner signs in by the printed link and invites vic as a viewer from the Team page.
    owner_page.goto(out.getvalue().strip().splitlines()[-1])
    owner_page.get_by_test_id("magic-continue").click()
    owner_page.wait_for_url(f"{base}/auth/passkeys")
    owner_page.goto(f"{base}/w/acme/approvals")
    owner_page.get_by_role("link", name="Team", exact=True).click()
    owner_page.wait_for_url(f"{base}/w/acme/team")
    owner_page.get_by_label("Email").fill("vic@acme.test")
    owner_page.get_by_label("Role", exact=True).select_option("viewer")
    owner_page.get_by_role("button", name="Send invitation").click()
    owner_page.locator('[data-testid="invitation-row"][data-email="vic@acme.test"]').wait_for()
    screenshot(owner_page, "team-owner")
    owner_page.set_viewport_size({"width": 390, "height": 844})
    screenshot(owner_page, "team-owner-phone")
    assert owner_page.evaluate("() => document.documentElement.scrollWidth") <= 390  # nothing sideways

    (mail,) = mailoutbox
    assert mail.to == ["vic@acme.test"]
    found = re.search(r"(https?://\S+/auth/magic/\S+)", mail.body)
    assert found is not None, mail.body
    link = found.group(1)
    assert link.startswith(f"{base}/auth/magic/")

    # 2. vic, in a browser of their own, opens the link: the page says what it joins, and the button uses it.
    context = chromium_context_factory()
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(15_000)
    cdp, authenticator_id = add_virtual_authenticator(page)
    violations = watch_csp_violations(page)
    page.goto(link)
    summary = page.get_by_test_id("invitation-summary").inner_text()
    assert "olivia@acme.test invited vic@acme.test" in summary and "viewer" in summary
    screenshot(page, "team-invitation-confirm")
    page.get_by_role("button", name="Accept and sign in").click()
    page.wait_for_url(f"{base}/auth/passkeys")
    assert "Welcome to Acme" in page.locator(".flash").inner_text()
    assert Membership.objects.get(user__email="vic@acme.test", workspace=workspace).role == "viewer"
    assert Invitation.objects.get(email="vic@acme.test").accepted_at is not None

    # 3. A passkey, then a fresh sign-in with it.
    add_passkey(page, "Vic's phone")
    assert Passkey.objects.filter(user__email="vic@acme.test").count() == 1
    assert len(cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})["credentials"]) == 1
    page.get_by_role("button", name="Sign out", exact=True).click()
    page.wait_for_url(re.compile(r"/auth/sign-in"))
    try:  # the autofill (conditional) request may complete by itself with the virtual authenticator
        page.wait_for_url(f"{base}/w/acme/approvals", timeout=3_000)
    except PlaywrightTimeout:
        page.get_by_role("button", name="Sign in with a passkey").click()
        page.wait_for_url(f"{base}/w/acme/approvals")

    # 4. A viewer reads everything, decides nothing, creates no keys and manages no team.
    assert page.get_by_test_id("your-role-link").inner_text() == "viewer"
    assert page.get_by_role("link", name="Team", exact=True).count() == 1  # read-only for a viewer, below
    assert page.get_by_role("link", name="Inboxes", exact=True).count() == 0
    page.goto(f"{base}/w/acme/approvals/{approval.public_id}")
    assert page.get_by_role("heading", name="Book an intro with Dana").is_visible()
    assert page.get_by_test_id("approve").count() == 0 and page.get_by_test_id("deny").count() == 0
    page.goto(f"{base}/w/acme/agents")
    assert page.get_by_test_id("agent-row").count() == 1 and page.get_by_test_id("agent-create").count() == 0
    page.goto(f"{base}/w/acme/agents/{agent.public_id}")
    assert page.get_by_test_id("key-table").is_visible() and page.get_by_test_id("key-create").count() == 0
    page.get_by_test_id("your-role-link").click()
    page.wait_for_url(f"{base}/w/acme/team#roles")
    assert page.get_by_test_id("your-role").inner_text().startswith("You are a viewer in Acme")
    assert page.get_by_test_id("invite-form").count() == 0 and page.get_by_test_id("role-select").count() == 0
    assert page.get_by_role("button", name="Leave").count() == 1  # their own row's one action
    screenshot(page, "team-viewer")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "team-viewer-phone")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390

    # 5. The owner's page now lists vic as a member, and no invitation waits.
    owner_page.set_viewport_size({"width": 1280, "height": 860})
    owner_page.reload()
    owner_page.locator('[data-testid="member-row"][data-email="vic@acme.test"]').wait_for()
    assert owner_page.get_by_test_id("invitations-empty").is_visible()
    screenshot(owner_page, "team-owner-members")
    assert owner_violations == [] and violations == []
    context.close()
