"""Mail setup on a phone while a domain waits for its proof: the Verify button and the domain form below it
stay apart, so the button is not read as part of the form's label, and the Copy button beside the long
record keeps its word whole."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.helpers import PHONE, acme_owner_and_agent, overflow, screenshot, sign_in
from workspaces.models import Workspace

pytestmark = pytest.mark.slow


def test_the_verify_button_keeps_apart_from_the_domain_form(
    live_server: Any, browser_page: Any, transactional_db: Any, settings: Any
) -> None:
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    workspace, owner, _ = acme_owner_and_agent()
    Workspace.objects.filter(pk=workspace.pk).update(
        inbound_domain_pending="mail.acme.test", inbound_domain_token="t" * 32
    )
    page = browser_page
    page.set_viewport_size(PHONE)
    sign_in(page, owner, base)

    page.goto(f"{base}/w/acme/settings/mail")
    verify = page.get_by_test_id("verify-form").locator("button").bounding_box()
    label = page.locator("label[for=m-domain]").bounding_box()
    screenshot(page, "mail-setup-pending-390")

    assert label["y"] - (verify["y"] + verify["height"]) >= 12
    # The Copy button beside a long record keeps its word on one line (a squeezed one read C-o-p-y).
    copy = page.locator("[data-copy=verification-record]").bounding_box()
    assert copy["height"] < 2 * 24
    assert overflow(page) == ""
