"""End to end in real Chromium: the owner opens the dashboard on 127.0.0.1 (where a passkey cannot work:
an IP address is no WebAuthn relying-party id), lands on the same page at DASHBOARD_BASE_URL (localhost),
adds a passkey there and signs in with it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from accounts.models import Passkey
from tests.e2e.helpers import add_passkey, add_virtual_authenticator, watch_csp_violations

pytestmark = pytest.mark.slow


def test_the_dashboard_opened_on_127_0_0_1_lands_on_localhost_where_a_passkey_signs_in(
    live_server, dashboard_settings, browser_page, transactional_db
):
    base = dashboard_settings.DASHBOARD_BASE_URL
    assert base.startswith("http://localhost:")
    by_ip = base.replace("localhost", "127.0.0.1")
    page = browser_page
    cdp, authenticator_id = add_virtual_authenticator(page)
    violations = watch_csp_violations(page)
    out = StringIO()
    call_command("create_owner", "olivia@acme.test", "--workspace", "acme", stdout=out, stderr=StringIO())
    link = out.getvalue().strip().splitlines()[-1]
    assert link.startswith(f"{base}/auth/magic/")

    # The sign-in link, opened by the address the server listens on, is the same page on localhost.
    page.goto(link.replace(base, by_ip))
    assert page.url == link
    page.get_by_test_id("magic-continue").click()
    page.wait_for_url(f"{base}/auth/passkeys")
    add_passkey(page, "Olivia's laptop")
    assert page.locator("[data-passkey-error]").is_hidden()
    assert Passkey.objects.filter(user__email="olivia@acme.test").count() == 1
    assert len(cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id})["credentials"]) == 1
    # Next time (a new session: a sign-in page left open would sign in again by itself through the passkey
    # autofill, racing the one below), the address `agentcal run` listened on: sent to localhost's sign-in,
    # where the passkey works.
    page.goto("about:blank")
    page.context.clear_cookies()
    response = page.goto(f"{by_ip}/")
    assert response is not None and response.url.startswith(f"{base}/auth/sign-in")
    try:  # the autofill (conditional) request may complete by itself with the virtual authenticator
        page.wait_for_url(f"{base}/w/acme/**", timeout=3_000)
    except PlaywrightTimeout:
        page.get_by_role("button", name="Sign in with a passkey").click()
        page.wait_for_url(f"{base}/w/acme/**")
    assert page.get_by_test_id("your-role-link").inner_text() == "owner"
    assert Passkey.objects.get(user__email="olivia@acme.test").last_used_at is not None
    assert not violations
