"""End to end in real Chromium: a signed-in owner pauses an agent through the confirm step, and the
agent's next write over real HTTP is refused (423); resuming lets it write again (201).
`-m screenshots` also shoots the agent's page with its limits, and the paused banner, at 1280 and 390 px."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from io import StringIO

import httpx
import pytest
from django.core.management import call_command

from audit.events import AuditEvent
from audit.models import AuditRecord
from guardrails.models import LimitNotice
from tests.e2e.axe import axe_violations, describe
from tests.e2e.helpers import (
    DESKTOP,
    PHONE,
    open_context,
    overflow,
    screenshot,
    sign_in,
    watch_csp_violations,
)
from tests.helpers import http_client, slot
from workspaces.keys import api_key_create
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


def write_status(api: httpx.Client, expected: int, within_seconds: float = 5.0) -> int:
    """The agent's write until it answers `expected` (each process follows a pause within a second)."""
    deadline = time.monotonic() + within_seconds
    while True:
        status = api.post("/calendars", json={"name": "Pipeline review"}).status_code
        if status == expected or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_an_owner_pauses_an_agent_and_its_writes_are_refused_until_resumed(
    live_server, dashboard_settings, browser_page, transactional_db
):
    base = dashboard_settings.DASHBOARD_BASE_URL
    page = browser_page
    violations = watch_csp_violations(page)
    quiet = {"stdout": StringIO(), "stderr": StringIO()}
    call_command("create_owner", "olivia@acme.test", "--workspace", "acme", **quiet)
    workspace = Workspace.objects.get(slug="acme")
    sign_in(page, workspace.memberships.get().user, base)
    agent = Agent.objects.create(workspace=workspace, name="sales-bot", slug="sales-bot", priority=100)
    _, raw = api_key_create(agent=agent, scopes=["calendars:write", "bookings:read", "bookings:write"])
    api = http_client(f"{live_server.url}/v1", headers={"Authorization": f"Bearer {raw}"})
    calendar = api.post("/calendars", json={"name": "Sales team"})
    assert calendar.status_code == 201, calendar.text
    hold = api.post(f"/calendars/{calendar.json()['id']}/holds", json=slot(hours_ahead=30))
    assert hold.status_code == 201, hold.text

    # 1. One click opens the confirm step; the agent keeps writing until it is confirmed.
    page.goto(f"{base}/w/acme/agents/{agent.public_id}")
    page.get_by_test_id("pause-agent").click()
    confirm = page.get_by_test_id("pause-confirm")
    confirm.wait_for()
    assert "Also release its live holds (1 now)" in confirm.inner_text()
    assert api.post("/calendars", json={"name": "Still writing"}).status_code == 201
    assert not axe_violations(page), describe(axe_violations(page))
    page.get_by_label(re.compile("Also release its live holds")).check()
    page.get_by_role("button", name="Yes, pause sales-bot").click()
    page.get_by_test_id("agent-paused").wait_for()
    assert "olivia@acme.test paused it at" in page.get_by_test_id("agent-paused").inner_text()
    assert "1 live hold released." in page.locator(".flash").inner_text()

    # 2. Its writes are refused over real HTTP; its reads still answer.
    assert write_status(api, 423) == 423
    refused = api.post("/calendars", json={"name": "Refused"})
    assert refused.json()["error"] == "agent_paused" and refused.json()["paused"] == "agent"
    assert api.get(f"/holds/{hold.json()['id']}").json()["status"] == "released"
    (paused,) = AuditRecord.objects.filter(event_type=AuditEvent.AGENT_PAUSED)
    assert paused.actor_user == "olivia@acme.test" and paused.details["release_holds"] is True

    # 3. Resume: writes work again.
    page.get_by_role("button", name="Resume agent").click()
    page.get_by_test_id("pause-agent").wait_for()
    assert page.get_by_test_id("agent-paused").count() == 0
    assert write_status(api, 201) == 201
    assert AuditRecord.objects.filter(event_type=AuditEvent.AGENT_RESUMED).count() == 1
    api.close()
    assert violations == []


@pytest.mark.screenshots
def test_guardrail_screenshots(live_server, dashboard_settings, chromium_context_factory, transactional_db):
    """test-artifacts/guardrails-<what>-<1280|390>.png: the agent's page with its limits, a limit met and
    its pause's confirm step; the agents page with the paused banner. Checked for sideways scrolling and
    axe as they are shot."""
    from django.contrib.auth import get_user_model

    from accounts.models import Membership, Role

    base = dashboard_settings.DASHBOARD_BASE_URL
    workspace = Workspace.objects.create(slug="acme", name="Acme Inc.", limit_bookings_per_day=500)
    owner = get_user_model().objects.create_user(username="olivia@acme.test", email="olivia@acme.test")
    Membership.objects.create(user=owner, workspace=workspace, role=Role.OWNER)
    agent = Agent.objects.create(
        workspace=workspace,
        name="sales-bot",
        slug="sales-bot",
        limit_live_holds=5,
        limit_requests_per_second=2.5,
    )
    Agent.objects.create(
        workspace=workspace, name="Exec assistant", slug="exec-assistant", priority=500, max_priority=900
    )
    _, raw = api_key_create(agent=agent, scopes=["calendars:write", "bookings:read", "bookings:write"])
    api = http_client(f"{live_server.url}/v1", headers={"Authorization": f"Bearer {raw}"})
    calendar = api.post("/calendars", json={"name": "Sales team"}).json()
    for hours in (26, 28, 30):
        api.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=hours)).raise_for_status()
    api.close()
    LimitNotice.objects.create(
        workspace=workspace, agent=agent, limit="requests", day=datetime.now(UTC).date()
    )

    problems = []
    for viewport in (DESKTOP, PHONE):
        width = viewport["width"]
        context, page, failures = open_context(chromium_context_factory, viewport)
        sign_in(page, owner, base)
        for name, path in [
            ("agent-limits", f"/w/acme/agents/{agent.public_id}"),
            ("agent-pause-confirm", f"/w/acme/agents/{agent.public_id}?confirm=pause#pause"),
            ("limit-defaults", "/w/acme/settings/limits"),
        ]:
            page.goto(base + path)
            screenshot(page, f"guardrails-{name}-{width}")
            problems += [f"{name} at {width}: {overflow(page)}"] if overflow(page) else []
            problems += [f"{name} at {width}:\n{describe(v)}"] if (v := axe_violations(page)) else []
        page.goto(f"{base}/w/acme/agents?confirm=pause")
        page.get_by_role("button", name="Yes, pause all agents").click()
        page.get_by_test_id("workspace-paused").wait_for()
        screenshot(page, f"guardrails-workspace-paused-{width}")
        page.goto(f"{base}/w/acme/agents/{agent.public_id}")
        screenshot(page, f"guardrails-agent-paused-banner-{width}")
        problems += [f"paused at {width}:\n{describe(v)}"] if (v := axe_violations(page)) else []
        page.get_by_role("button", name="Resume all agents").click()
        page.wait_for_url(f"{base}/w/acme/agents/{agent.public_id}")
        problems += [f"at {width}: {failure}" for failure in failures]
        context.close()
    assert not problems, "\n".join(problems)
