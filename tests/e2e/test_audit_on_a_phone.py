"""The audit trail on a phone in real Chromium: the table becomes cards without widening the page, a row's
Details button opens its full record in place (keyboard and screen reader state included), and the CSV link
downloads the filtered selection."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from django.test import Client

from accounts.models import Membership, Role
from tests.dashboard.pages_helpers import insert_audit_row
from tests.e2e.helpers import screenshot, watch_csp_violations
from workspaces.models import Agent, Workspace


def test_the_audit_table_reads_as_cards_on_a_phone_and_downloads_its_csv(
    live_server, browser_page, django_user_model
):
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    sdr = Agent.objects.create(workspace=workspace, name="SDR bot", slug="sdr")
    person = django_user_model.objects.create_user(username="mo@acme.test", email="mo@acme.test")
    Membership.objects.create(user=person, workspace=workspace, role=Role.VIEWER)
    now = datetime.now(UTC)
    for minutes in range(5, -1, -1):  # oldest first, as the trail records them
        insert_audit_row(
            workspace_id=workspace.pk,
            at=now - timedelta(minutes=minutes),
            event_type="calendar.booking.attendee_response.rejected"
            if minutes % 2
            else "calendar.hold.rejected",
            outcome="rejected",
            agent_public_id=sdr.public_id,
            failure_reason="slot_conflict",
        )
    insert_audit_row(workspace_id=workspace.pk, at=now, event_type="calendar.hold.created")
    signed_in = Client()
    signed_in.force_login(person)
    base = live_server.url.replace("127.0.0.1", "localhost")
    page = browser_page
    page.context.add_cookies(
        [{"name": "sessionid", "value": signed_in.cookies["sessionid"].value, "url": base}]
    )
    violations = watch_csp_violations(page)
    page.set_viewport_size({"width": 390, "height": 844})

    page.goto(f"{base}/w/acme/audit?outcome=rejected")

    rows = page.get_by_test_id("audit-row")
    assert rows.count() == 6
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390  # nothing widens the page
    assert page.locator("caption").count() == 1
    # The filters fold into a disclosure on a phone; opened, they keep their labels and whole values.
    outcome = page.get_by_label("Outcome")
    assert not outcome.is_visible()
    page.get_by_test_id("filters-toggle").click()
    assert outcome.is_visible()
    assert outcome.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
    details = rows.first.get_by_role("button", name="Details")
    details.focus()
    page.keyboard.press("Enter")
    record = page.locator("tr.record-row").first
    record.get_by_test_id("record-detail").wait_for()
    assert details.get_attribute("aria-expanded") == "true" and record.is_visible()
    screenshot(page, "audit-phone")
    page.keyboard.press("Enter")
    assert details.get_attribute("aria-expanded") == "false" and not record.is_visible()

    with page.expect_download() as download_info:
        page.get_by_test_id("audit-csv").click()
    download = download_info.value
    assert download.suggested_filename.startswith("audit-acme-")
    with open(download.path(), encoding="utf-8") as handle:
        exported = list(csv.DictReader(io.StringIO(handle.read())))
    assert len(exported) == 6 and {row["outcome"] for row in exported} == {"rejected"}
    assert violations == []
