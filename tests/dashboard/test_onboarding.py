"""The getting-started guide: where `/` lands, the steps made on the page (audited like anywhere else), the
key shown once, the script that really books a slot through the API, and the checklist ticking itself."""

from __future__ import annotations

import html
import re
import subprocess
from datetime import time

import pytest

from accounts.models import Membership, Role
from audit.models import AuditRecord
from bookings.engine import hold_create
from bookings.models import Reservation
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    signed_in,
    span_on,
    tables_containing,
    text,
)
from workspaces.keys import api_key_create
from workspaces.models import Agent, ApiKey, Workspace

START = "/w/acme/start"
GUIDE_KEY = re.compile(r'<code id="guide-raw-key">(avs_live_[A-Za-z0-9_-]+)</code>')
SCRIPT = re.compile(r'<code id="guide-script" data-testid="guide-script">(.*?)</code>', re.S)


def person(user_model, email: str, workspace: Workspace, role: str):
    user = user_model.objects.create_user(username=email, email=email)
    Membership.objects.create(user=user, workspace=workspace, role=role)
    return user


@pytest.fixture
def acme(db) -> Workspace:
    return Workspace.objects.create(slug="acme", name="Acme")


@pytest.fixture
def owner(acme, django_user_model):
    return person(django_user_model, "olivia@acme.test", acme, Role.OWNER)


def step_done(page: str, step: str) -> bool:
    match = re.search(rf'data-testid="step-{step}" data-done="(true|false)"', page)
    assert match, page
    return match.group(1) == "true"


def script_of(page: str) -> str:
    match = SCRIPT.search(page)
    assert match, page
    return html.unescape(match.group(1))


def test_owners_of_a_new_workspace_land_on_the_guide_and_everyone_else_on_the_approvals(
    acme, owner, django_user_model
):
    approver = person(django_user_model, "mo@acme.test", acme, Role.APPROVER)
    assert signed_in(owner).get("/")["Location"] == START
    assert signed_in(approver).get("/")["Location"] == "/w/acme/approvals"

    # Set up (an agent, a live key, a reservation): the owner lands on the approvals too.
    agent = Agent.objects.create(workspace=acme, name="SDR", slug="sdr")
    assert signed_in(owner).get("/")["Location"] == START
    api_key_create(agent=agent, scopes=["bookings:write"])
    assert signed_in(owner).get("/")["Location"] == START
    calendar = make_calendar(acme)
    hold_create(actor=actor(agent), calendar=calendar, span=span_on(future_day(), time(10)), ttl_seconds=600)
    assert signed_in(owner).get("/")["Location"] == "/w/acme/approvals"


def test_hiding_the_guide_sends_this_browser_to_the_approvals(acme, owner):
    client = signed_in(owner)
    hidden = client.post(f"{START}/hide")
    assert hidden.status_code == 303 and hidden["Location"] == "/w/acme/approvals"
    cookie = hidden.cookies["agentcal_guide_hidden"]
    assert cookie.value == acme.public_id and cookie["httponly"] and cookie["samesite"] == "Lax"
    assert client.get("/")["Location"] == "/w/acme/approvals"
    assert client.get(START).status_code == 200  # still reachable from the empty states' links
    assert signed_in(owner).get("/")["Location"] == START  # another browser


def test_the_agent_and_key_made_on_the_guide_are_audited_and_the_key_is_shown_once(acme, owner):
    client = signed_in(owner)
    page = text(client.get(START))
    assert not step_done(page, "agent") and 'data-testid="guide-agent-form"' in page
    assert 'data-testid="guide-key-form"' not in page  # no agent yet

    made = client.post(f"{START}/agent", {"name": "Sales assistant"})
    assert made.status_code == 303 and made["Location"] == f"{START}#step-key"
    agent = Agent.objects.get(workspace=acme)
    assert (agent.name, agent.slug) == ("Sales assistant", "sales-assistant")
    page = text(client.get(START))
    assert step_done(page, "agent") and not step_done(page, "key")

    keyed = client.post(f"{START}/key", {"agent": agent.public_id})
    assert keyed.status_code == 303 and keyed["Location"] == f"{START}#step-booking"
    shown = client.get(START)
    assert "no-store" in shown["Cache-Control"]
    (raw,) = GUIDE_KEY.findall(text(shown))
    assert raw not in keyed["Location"]
    assert f"AGENTCAL_KEY={raw}" in script_of(text(shown)) and step_done(text(shown), "key")
    key = ApiKey.objects.get(agent=agent)
    assert key.scopes == ["bookings:read", "bookings:write", "calendars:read", "calendars:write"]

    reload = text(client.get(START))
    assert raw not in reload and "AGENTCAL_KEY='paste your key here'" in script_of(reload)
    assert ApiKey.objects.count() == 1 and tables_containing(raw[20:]) == []
    rows = AuditRecord.objects.filter(actor_user="olivia@acme.test").order_by("id")
    assert [row.event_type for row in rows] == ["agent.created", "api_key.created"]


def test_a_blank_agent_name_is_refused_inline(acme, owner):
    response = signed_in(owner).post(f"{START}/agent", {"name": "  "})
    assert response.status_code == 400 and 'id="g-name-error">This field is required.' in text(response)
    assert not Agent.objects.exists()


def test_members_read_the_guide_and_cannot_post_its_steps(acme, owner, django_user_model):
    viewer = signed_in(person(django_user_model, "vic@acme.test", acme, Role.VIEWER))
    page = text(viewer.get(START))
    assert "An owner or admin of the workspace creates agents." in page
    assert 'data-testid="guide-agent-form"' not in page
    assert viewer.post(f"{START}/agent", {"name": "Sneaky"}).status_code == 403
    agent = Agent.objects.create(workspace=acme, name="SDR", slug="sdr")
    assert viewer.post(f"{START}/key", {"agent": agent.public_id}).status_code == 403
    assert not ApiKey.objects.exists() and Agent.objects.count() == 1


def test_a_key_only_for_an_active_agent_of_this_workspace(acme, owner):
    globex = Workspace.objects.create(slug="globex", name="Globex")
    rival = Agent.objects.create(workspace=globex, name="Rival", slug="rival")
    retired = Agent.objects.create(workspace=acme, name="Retired", slug="retired", is_active=False)
    client = signed_in(owner)
    for agent_id in (rival.public_id, retired.public_id, "agt_\x00"):
        refused = client.post(f"{START}/key", {"agent": agent_id}, follow=True)
        assert "Choose one of the workspace&#x27;s active agents." in text(refused)
    assert not ApiKey.objects.exists()
    assert signed_in(owner).get("/w/globex/start").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_the_script_books_a_slot_through_the_api_and_the_guide_ticks_itself(live_server, settings, owner):
    settings.DASHBOARD_BASE_URL = live_server.url
    client = signed_in(owner)
    client.post(f"{START}/agent", {"name": "Sales assistant"})
    client.post(f"{START}/key", {"agent": Agent.objects.get().public_id})
    page = text(client.get(START))
    assert 'hx-trigger="every 3s"' in page  # waiting for the booking: the step polls

    # The script exactly as a person copies it, run by a real shell with a real curl.
    ran = subprocess.run(["sh", "-c", script_of(page)], capture_output=True, text=True, timeout=30)

    assert ran.returncode == 0, ran.stderr
    assert '"status":"committed"' in ran.stdout.replace(" ", ""), ran.stdout
    booking = Reservation.objects.select_related("calendar").get()
    assert (booking.title, booking.calendar.name, booking.status) == (
        "First booking",
        "First calendar",
        "committed",
    )
    poll = client.get(START, headers={"HX-Request": "true"})
    polled = text(poll)
    assert "<html" not in polled and "It's there" in polled and 'hx-trigger="every' not in polled
    assert f'href="/w/acme/calendars/{booking.calendar.public_id}?date=' in polled
    assert f"#{booking.booking_id}" in polled
    assert 'id="booking-mark" class="guide-mark done"' in polled and 'hx-swap-oob="true"' in polled
    assert 'data-done="3"' in polled and 'data-testid="guide-hide"' in polled
    # With a calendar in the workspace, the script books on it instead of making another.
    assert f"CALENDAR={booking.calendar.public_id}" in script_of(text(client.get(START)))
