"""End to end in real Chromium: from `create_owner` to deciding an agent's approval with a passkey."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from accounts.models import Passkey
from tests.e2e.helpers import add_passkey, add_virtual_authenticator, screenshot, watch_csp_violations
from tests.helpers import http_client, slot
from workspaces.keys import api_key_create
from workspaces.models import Agent, ApiKey, Workspace

pytestmark = pytest.mark.slow


def test_owner_signs_up_with_a_magic_link_adds_a_passkey_and_approves_an_agents_request(
    live_server, dashboard_settings, browser_page, transactional_db
):
    base = dashboard_settings.DASHBOARD_BASE_URL
    page = browser_page
    cdp, authenticator_id = add_virtual_authenticator(page)
    csp_violations = watch_csp_violations(page)

    out = StringIO()
    call_command("create_owner", "olivia@acme.test", "--workspace", "acme", stdout=out, stderr=StringIO())
    link = out.getvalue().strip().splitlines()[-1]
    assert link.startswith(f"{base}/auth/magic/")

    # 1. First sign-in by magic link; the page asks for a passkey. Every page carries the policy that
    #    refuses inline script, and the one-time link's page is kept by no cache.
    response = page.goto(link)
    assert "script-src 'self';" in response.headers["content-security-policy"]
    assert "no-store" in response.headers["cache-control"]
    page.get_by_test_id("magic-continue").click()
    page.wait_for_url(f"{base}/auth/passkeys")
    assert page.get_by_test_id("add-passkey-prompt").is_visible()
    add_passkey(page, "Olivia's laptop")
    assert Passkey.objects.filter(user__email="olivia@acme.test", name="Olivia's laptop").count() == 1
    assert len(cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})["credentials"]) == 1
    screenshot(page, "passkeys")

    # 2. Sign out, then sign in with the passkey.
    page.get_by_role("button", name="Sign out", exact=True).click()
    page.wait_for_url(re.compile(r"/auth/sign-in"))
    screenshot(page, "sign-in")
    # The sign-in page starts a conditional-UI (autofill) passkey request; Chromium's virtual
    # authenticator, which simulates the user's touch, may complete it by itself. Otherwise the button.
    # A new workspace's owner lands on its getting-started guide.
    try:
        page.wait_for_url(f"{base}/w/acme/start", timeout=3_000)
    except PlaywrightTimeout:
        page.get_by_role("button", name="Sign in with a passkey").click()
        page.wait_for_url(f"{base}/w/acme/start")
    assert page.get_by_test_id("guide-agent-form").is_visible()
    screenshot(page, "get-started")
    page.get_by_role("link", name="Go to the approvals").click()
    page.wait_for_url(f"{base}/w/acme/approvals")
    screenshot(page, "approvals-empty")

    # 3. An agent opens an approval through the API; the queue shows it without a reload.
    workspace = Workspace.objects.get(slug="acme")
    agent = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr-bot", priority=100, max_priority=100
    )
    _, raw = api_key_create(
        agent=agent,
        scopes=["approvals:read", "approvals:write", "calendars:write", "bookings:read", "bookings:write"],
    )
    api = http_client(f"{live_server.url}/v1", headers={"Authorization": f"Bearer {raw}"})
    created = api.post(
        "/approvals",
        json={
            "summary": "Book a 30-minute intro with Dana (ACME) on Tuesday",
            "evidence": {"thread": ["Can we meet Tuesday?", "<script>alert('x')</script>"], "score": 0.92},
            "state": {"step": 3},
        },
    )
    assert created.status_code == 201, created.text
    approval_id = created.json()["id"]
    page.get_by_test_id("pending-row").wait_for(timeout=15_000)  # htmx polling brings it in
    screenshot(page, "approvals-queue")

    # 4. Decide it; the evidence is escaped, not executed.
    page.get_by_test_id("pending-row").get_by_role("link", name="Review").click()
    page.wait_for_url(f"{base}/w/acme/approvals/{approval_id}")
    assert "<script>alert('x')</script>" in page.get_by_test_id("evidence").inner_text()
    screenshot(page, "approval-detail")
    page.get_by_label("Note to the agent").fill("Go ahead.")
    page.get_by_test_id("approve").click()
    page.get_by_test_id("confirm-approve").click()  # deciding takes a confirmation
    page.wait_for_url(f"{base}/w/acme/approvals")

    # 5. The agent reads the decision back.
    decided = api.get(f"/approvals/{approval_id}").json()
    assert decided["status"] == "approved"
    assert decided["decided_by"] == "olivia@acme.test"
    assert decided["note"] == "Go ahead."
    # Some calendar activity for the timeline, audit and metrics pages.
    cal = api.post("/calendars", json={"name": "Sales team", "hold_ttl_seconds": 600}).json()
    for hours, minutes in [(2, 30), (3, 60), (26, 30)]:
        window = slot(hours_ahead=hours, minutes=minutes)
        api.post(f"/calendars/{cal['id']}/holds", json={**window, "title": f"Intro call +{hours}h"})
        api.post(f"/calendars/{cal['id']}/holds", json=window)  # the same slot again: a conflict
    api.post(f"/calendars/{cal['id']}/commits", json={**slot(hours_ahead=5), "title": "Board prep"})
    # A released hold and the hold that took its slot overlap on the timeline: they sit side by side.
    overlap = slot(hours_ahead=7, minutes=60)
    released = api.post(f"/calendars/{cal['id']}/holds", json={**overlap, "title": "Released"}).json()
    api.delete(f"/holds/{released['id']}", params={"hold_token": released["hold_token"]}).raise_for_status()
    retaken = api.post(f"/calendars/{cal['id']}/holds", json={**overlap, "title": "Retaken"}).json()
    overlap_day = overlap["start_time"][:10]  # the calendar is in UTC
    api.close()

    # 6. The other pages render in the real browser (screenshots kept as test artifacts).
    for path, name in [
        ("audit", "audit-trail"),
        ("calendars", "calendars"),
        (f"calendars/{cal['id']}?date={overlap_day}", "calendar-week"),
        ("metrics", "metrics"),
        ("agents", "agents"),
        (f"agents/{agent.public_id}", "agent-detail"),
    ]:
        page.goto(f"{base}/w/acme/{path}")
        assert page.locator("h1").first.is_visible()
        screenshot(page, name)

    # 7. The timeline's geometry comes as data-* attributes (the policy refuses style=""), which app.js
    #    applies on load and again after every htmx poll: the overlapping pair splits its day column.
    #    The released hold shows with ended reservations on, and +7 h may be outside working hours: all 24.
    page.goto(f"{base}/w/acme/calendars/{cal['id']}?date={overlap_day}&ended=1&hours=24")
    assert page.eval_on_selector(".block", "e => e.style.width")
    column = page.locator(f'[data-testid="day-column"][data-day="{overlap_day}"] .timeline-body')

    def assert_side_by_side() -> None:
        column_box = column.bounding_box()
        left, right = sorted(
            (
                page.locator(f'[data-reservation="{hold["id"]}"]').bounding_box()
                for hold in (released, retaken)
            ),
            key=lambda box: box["x"],
        )
        top_percent = float(
            page.get_attribute(f'[data-reservation="{retaken["id"]}"]', "data-top").rstrip("%")
        )
        expected_top = column_box["y"] + column_box["height"] * top_percent / 100
        assert left["y"] == pytest.approx(expected_top, abs=1) and right["y"] == pytest.approx(
            expected_top, abs=1
        )
        for box in (left, right):
            assert box["width"] == pytest.approx(column_box["width"] / 2 - 6, abs=1)
        assert right["x"] - left["x"] == pytest.approx(column_box["width"] / 2, abs=1)

    assert_side_by_side()
    page.eval_on_selector_all(".block", "blocks => blocks.forEach((b) => { b.dataset.beforePoll = '1'; })")
    page.wait_for_function("() => !document.querySelector('.block[data-before-poll]')")  # swapped in anew
    assert page.eval_on_selector(".block", "e => e.style.width")
    assert_side_by_side()

    # 8. What used to be inline script, now in app.js: clickable rows, the audit filters' short URLs,
    #    the confirmation before revoking a key.
    page.goto(f"{base}/w/acme/calendars")
    page.get_by_test_id("calendar-row").get_by_role("cell", name="UTC", exact=True).click()
    page.wait_for_url(f"{base}/w/acme/calendars/{cal['id']}")
    page.goto(f"{base}/w/acme/audit")
    page.locator("#f-outcome").select_option("rejected")
    page.wait_for_url(f"{base}/w/acme/audit?outcome=rejected")  # htmx pushed it, blank filters left out
    page.get_by_test_id("audit-row").first.wait_for()
    assert page.locator(".audit-row:not(.rejected)").count() == 0

    page.goto(f"{base}/w/acme/agents/{agent.public_id}")
    # Revoking asks first, in the page: "Keep it" changes nothing, "Yes, revoke" revokes.
    page.get_by_role("button", name="Revoke").click()
    confirm = page.get_by_test_id("inline-confirm")
    assert confirm.inner_text().startswith("Revoke avs_live_")
    confirm.get_by_role("button", name="Keep it").click()
    assert ApiKey.objects.get(agent=agent).revoked_at is None
    page.get_by_role("button", name="Revoke").click()
    page.get_by_role("button", name="Yes, revoke").click()
    page.locator('[data-testid="key-row"][data-status="revoked"]').wait_for()

    # 9. Not one refusal across the journey; and the watcher does hear one (an inline script, refused).
    assert csp_violations == []
    with page.expect_console_message(lambda message: "Content Security Policy" in message.text):
        page.evaluate(
            "() => { const s = document.createElement('script');"
            " s.textContent = 'window.inlineRan = true'; document.head.append(s); }"
        )
    assert page.evaluate("() => window.inlineRan") is None
    assert csp_violations
