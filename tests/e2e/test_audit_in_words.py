"""The audit trail and the approvals page in words, in real Chromium: rows read as sentences, the event
filter groups events under readable names, a record's facts show with the raw JSON behind a toggle and
ids copy from the keyboard; on a phone the filters fold into a "Filters" disclosure. After a decision
the flash and the Recent list say what was booked and link to it on the calendar, drawer open."""

from __future__ import annotations

from datetime import time
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from accounts.models import Membership, Role
from agentcal.errors import SlotConflict
from approvals.services import approval_request
from bookings.engine import booking_cancel_by_person, booking_create, calendar_create, hold_create
from tests.dashboard.pages_helpers import future_day, span_on
from tests.e2e.axe import axe_violations, describe
from tests.e2e.helpers import screenshot, watch_csp_violations
from tests.e2e.test_approvals_live import browser_for
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


def seed(django_user_model: Any) -> dict[str, Any]:
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    owner = django_user_model.objects.create_user(username="owner@acme.example", email="owner@acme.example")
    Membership.objects.create(user=owner, workspace=workspace, role=Role.OWNER)
    sdr = Agent.objects.create(workspace=workspace, name="sdr", slug="sdr", priority=100, max_priority=100)
    as_sdr = Actor(workspace=workspace, agent=sdr)
    berlin = calendar_create(actor=as_sdr, name="Berlin office", timezone="Europe/Berlin")
    day = future_day()
    booking = booking_create(
        actor=as_sdr, calendar=berlin, span=span_on(day, time(8, 0), 60), title="Quarterly planning"
    )
    booking_cancel_by_person(
        actor=Actor(workspace=workspace, agent=None, user_email=owner.email),
        booking_id=booking.primary.booking_id or "",
    )
    hold_create(actor=as_sdr, calendar=berlin, span=span_on(day, time(13, 0)), title="Intro call")
    with pytest.raises(SlotConflict):
        hold_create(actor=as_sdr, calendar=berlin, span=span_on(day, time(13, 0)), title="Intro again")
    return {
        "workspace": workspace,
        "owner": owner,
        "sdr": sdr,
        "berlin": berlin,
        "day": day,
        "as_sdr": as_sdr,
    }


def test_audit_rows_read_as_sentences_with_grouped_filters_facts_and_ids_to_copy(
    live_server, transactional_db, chromium_context_factory, django_user_model, settings
):
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    world = seed(django_user_model)
    page = browser_for(chromium_context_factory, base, world["owner"])
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    violations = watch_csp_violations(page)

    page.goto(f"{base}/w/acme/audit")

    sentences = page.get_by_test_id("audit-sentence")
    local = span_on(world["day"], time(13, 0)).start.astimezone(ZoneInfo("Europe/Berlin"))
    slot = f"{local:%a} {local.day} {local:%b %H:%M}–{local.replace(minute=30):%H:%M %Z}"
    expect(sentences.nth(0)).to_have_text(
        f"Agent sdr was refused a hold for {slot} on Berlin office: slot taken (409)"
    )
    expect(sentences.nth(1)).to_have_text(f"Agent sdr held {slot} on Berlin office")
    expect(sentences.nth(2)).to_have_text("owner@acme.example cancelled Quarterly planning on Berlin office")
    expect(sentences.nth(2).locator("em")).to_have_text("Quarterly planning")
    # The event filter: readable groups and names, the codes as values.
    groups = page.locator("#f-event optgroup").evaluate_all("els => els.map(e => e.label)")
    assert groups[:2] == ["Holds", "Bookings"] and {"Approvals", "Team", "Limits", "Upstream sync"} <= set(
        groups
    )
    labels = page.locator("#f-event option").evaluate_all("els => els.map(e => e.textContent)")
    assert not [label for label in labels if "." in label], labels
    page.locator("#f-event").select_option(label="Hold refused")
    page.wait_for_url("**event_type=calendar.hold.rejected**")
    expect(page.get_by_test_id("audit-row")).to_have_count(1)
    screenshot(page, "audit-words-desktop")

    # A record's facts, its raw JSON behind a toggle, and an id copied from the keyboard.
    page.get_by_role("button", name="Details").click()
    facts = page.get_by_test_id("record-facts")
    expect(facts).to_be_visible()
    expect(facts).to_contain_text("Why refused")
    raw = page.get_by_test_id("raw-json")
    expect(raw.locator("pre")).to_be_hidden()
    raw.locator("summary").click()
    expect(raw.locator("pre")).to_be_visible()
    expect(raw.locator("pre")).to_contain_text('"event_type"')
    sdr_id = world["sdr"].public_id
    expect(page.get_by_role("button", name=f"Copy {sdr_id}")).to_have_count(1)
    copy = page.locator(f'[data-copy-text="{sdr_id}"]')
    id_text = copy.locator("xpath=preceding-sibling::code")
    assert id_text.evaluate("el => getComputedStyle(el).textOverflow") == "ellipsis"
    assert id_text.evaluate("el => getComputedStyle(el).whiteSpace") == "nowrap"
    copy.focus()
    page.keyboard.press("Enter")
    expect(copy.locator(".id-copy-label")).to_have_text("Copied")
    expect(copy).to_have_accessible_name(f"Copied {sdr_id}")
    assert page.evaluate("navigator.clipboard.readText()") == sdr_id
    expect(page.locator("#copy-status")).to_have_text(f"Copied {sdr_id}")
    screenshot(page, "audit-record-facts-desktop")
    found = axe_violations(page)  # the open record, its facts, copy buttons and raw JSON included
    assert not found, describe(found)
    assert violations == []


def test_on_a_phone_the_filters_fold_away_and_rows_fit(
    live_server, transactional_db, chromium_context_factory, django_user_model, settings
):
    base = live_server.url.replace("127.0.0.1", "localhost")
    world = seed(django_user_model)
    page = browser_for(chromium_context_factory, base, world["owner"], width=390)
    violations = watch_csp_violations(page)

    page.goto(f"{base}/w/acme/audit")

    toggle = page.get_by_test_id("filters-toggle")
    expect(toggle).to_be_visible()
    expect(page.get_by_label("Event")).to_be_hidden()
    expect(page.get_by_test_id("audit-sentence").first).to_be_visible()
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
    screenshot(page, "audit-words-phone")
    toggle.focus()
    page.keyboard.press("Enter")  # a <summary> opens from the keyboard
    expect(page.get_by_label("Event")).to_be_visible()
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
    page.get_by_label("Outcome").select_option("rejected")
    page.wait_for_url("**outcome=rejected**")
    expect(page.get_by_test_id("audit-row")).to_have_count(1)
    expect(toggle).to_contain_text("1 on")  # after the swap the page still says a filter is on
    page.get_by_role("button", name="Details").click()
    expect(page.get_by_test_id("record-facts")).to_be_visible()
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
    screenshot(page, "audit-words-phone-record")
    found = axe_violations(page)
    assert not found, describe(found)
    # Widened, the filters show whole again.
    page.set_viewport_size({"width": 1280, "height": 900})
    expect(toggle).to_be_hidden()
    expect(page.get_by_label("Event")).to_be_visible()
    assert violations == []


def test_the_decision_flash_and_recent_list_say_what_was_booked_and_link_to_it(
    live_server, transactional_db, chromium_context_factory, django_user_model, settings
):
    base = live_server.url.replace("127.0.0.1", "localhost")
    settings.CSRF_TRUSTED_ORIGINS = [base]
    world = seed(django_user_model)
    span = span_on(world["day"], time(14, 0))
    hold = hold_create(actor=world["as_sdr"], calendar=world["berlin"], span=span, title="Board prep").primary
    approval = approval_request(
        actor=world["as_sdr"], summary="Book the board prep", evidence={"why": "asked"}, hold_id=hold.hold_id
    )
    page = browser_for(chromium_context_factory, base, world["owner"])
    violations = watch_csp_violations(page)

    page.goto(f"{base}/w/acme/approvals/{approval.public_id}")
    page.get_by_test_id("approve").click()
    page.get_by_test_id("confirm-approve").click()
    page.wait_for_url(f"{base}/w/acme/approvals")

    local = span.start.astimezone(ZoneInfo("Europe/Berlin"))
    when = f"{local:%a} {local.day} {local:%b %H:%M} {local.tzname()}"  # CET or CEST, named
    said = f"Booked Board prep on Berlin office, {when} — see it on the calendar"
    flash = page.locator(".flash")
    expect(flash).to_have_text(said)
    expect(page.get_by_test_id("recent-decision").first).to_have_text(said)
    screenshot(page, "approval-decided-flash")
    found = axe_violations(page)  # the flash's link on its tint, the Recent list's sentence
    assert not found, describe(found)
    flash.get_by_role("link", name="see it on the calendar").click()
    page.wait_for_url(f"**/calendars/{world['berlin'].public_id}?view=day&date={local.date().isoformat()}*")
    drawer = page.locator("#cal-drawer")
    expect(drawer).to_have_attribute("open", "")
    expect(drawer.get_by_test_id("drawer-status")).to_have_text("committed")
    expect(drawer).to_contain_text("Board prep")

    # The Recent list's link leads to the same place.
    page.goto(f"{base}/w/acme/approvals")
    page.get_by_test_id("recent-decision").first.get_by_role("link").click()
    expect(page.locator("#cal-drawer")).to_have_attribute("open", "")
    assert violations == []
