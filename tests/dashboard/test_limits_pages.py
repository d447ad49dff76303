"""Limits in the dashboard: the agent's page shows each limit in force, who set it (the agent, the
workspace's default, the installation) and the budgets used now; owners and admins set the agent's own
limits and the workspace's defaults (blank inherits), with refusals shown beside the fields as typed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time

import pytest
from django.conf import settings

from accounts.models import Membership, Role
from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.engine import hold_create
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    make_team,
    signed_in,
    span_on,
    text,
)
from workspaces.models import Agent, AgentUsage, Workspace

AGENTS = "/w/acme/agents"
DEFAULTS = "/w/acme/settings/limits"
INSTALLATION = settings.AGENT_LIMIT_DEFAULTS


@pytest.fixture
def team(db, django_user_model):
    team = make_team(django_user_model)
    team.viewer = django_user_model.objects.create_user(username="vic@acme.test", email="vic@acme.test")
    Membership.objects.create(user=team.viewer, workspace=team.workspace, role=Role.VIEWER)
    return team


def page(agent: Agent) -> str:
    return f"{AGENTS}/{agent.public_id}"


def limit_row(html: str, name: str) -> str:
    start = html.index(f'data-limit="{name}"')
    return html[start : html.index("</tr>", start)]


def origin(html: str, name: str) -> str:
    match = re.search(
        r'data-origin="(\w+)"', html[html.rindex("<tr", 0, html.index(f'data-limit="{name}"')) :]
    )
    assert match is not None
    return match.group(1)


def value_in_force(html: str, name: str) -> str:
    match = re.search(r'data-testid="limit-value"><strong>([^<]+)</strong>', limit_row(html, name))
    assert match is not None
    return match.group(1)


def field_value(html: str, name: str) -> str:
    match = re.search(rf'<input id="l-{name}" name="{name}"[^>]*value="([^"]*)"', html)
    assert match is not None, name
    return match.group(1)


def limits_of(agent: Agent) -> dict[str, float | None]:
    fresh = Agent.objects.get(pk=agent.pk)
    return {name: getattr(fresh, f"limit_{name}") for name in INSTALLATION}


EVERY_BLANK = dict.fromkeys(INSTALLATION, "")


# --- The agent's page ------------------------------------------------------------------------------------


def test_the_agents_page_shows_each_limit_who_set_it_and_the_budgets_used(team):
    Workspace.objects.filter(pk=team.workspace.pk).update(limit_live_holds=40, limit_bookings_per_day=3000)
    Agent.objects.filter(pk=team.sdr.pk).update(limit_live_holds=5, limit_requests_per_second=2.5)
    calendar, day = make_calendar(team.workspace), future_day(2)
    for hour in (9, 10):
        hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(hour)))
    AgentUsage.objects.filter(agent=team.sdr).update(day=datetime.now(UTC).date(), bookings_on_day=12)

    html = text(signed_in(team.viewer).get(page(team.sdr)))

    assert (origin(html, "live_holds"), value_in_force(html, "live_holds")) == ("agent", "5")
    assert (origin(html, "requests_per_second"), value_in_force(html, "requests_per_second")) == (
        "agent",
        "2.5",
    )
    assert (origin(html, "bookings_per_day"), value_in_force(html, "bookings_per_day")) == (
        "workspace",
        "3,000",
    )
    assert "workspace default" in limit_row(html, "bookings_per_day")
    assert f'href="{DEFAULTS}"' in limit_row(html, "bookings_per_day")
    assert origin(html, "searches_per_minute") == "installation"
    assert value_in_force(html, "searches_per_minute") == str(INSTALLATION["searches_per_minute"])
    assert "installation default" in limit_row(html, "searches_per_minute")
    usage = html[html.index('data-testid="limit-usage"') :]
    assert re.search(r"2 <span class=\"of\">/ 5</span>.*Live holds now", usage, re.S)
    assert re.search(r"12 <span class=\"of\">/ 3,000</span>.*Bookings today", usage, re.S)
    # A viewer reads; no field, no form.
    assert 'data-testid="limits-form"' not in html and 'name="live_holds"' not in html


@pytest.mark.parametrize("who", ["owner", "admin"])
def test_owners_and_admins_set_the_agents_own_limits_and_blank_inherits(team, who):
    Agent.objects.filter(pk=team.sdr.pk).update(limit_searches_per_minute=30)
    person = signed_in(getattr(team, who))
    html = text(person.get(page(team.sdr)))
    assert 'data-testid="limits-form"' in html and "csrfmiddlewaretoken" in html
    assert field_value(html, "searches_per_minute") == "30" and field_value(html, "live_holds") == ""
    assert f'placeholder="inherit: {INSTALLATION["live_holds"]:,}"' in html

    response = person.post(
        f"{page(team.sdr)}/limits",
        {**EVERY_BLANK, "requests_per_second": "0.5", "live_holds": "3", "bookings_per_day": " 250 "},
    )

    assert response.status_code == 302 and response["Location"] == f"{page(team.sdr)}#limits"
    assert limits_of(team.sdr) == {
        "requests_per_second": 0.5,
        "request_burst": None,
        "live_holds": 3,
        "bookings_per_day": 250,
        "searches_per_minute": None,  # blank: back to the workspace's default
    }
    (row,) = AuditRecord.objects.filter(event_type=AuditEvent.AGENT_LIMITS_UPDATED)
    assert row.actor_user == getattr(team, who).email
    assert row.details["changes"]["searches_per_minute"] == [30, None]
    after = text(person.get(page(team.sdr)))
    assert "Limits of SDR bot saved" in after
    assert field_value(after, "requests_per_second") == "0.5" and origin(after, "live_holds") == "agent"
    assert origin(after, "searches_per_minute") == "installation"


def test_a_refused_limit_is_shown_beside_its_field_and_nothing_typed_is_lost(team):
    admin = signed_in(team.admin)
    typed = {**EVERY_BLANK, "requests_per_second": "0", "request_burst": "lots", "live_holds": "7"}

    response = admin.post(f"{page(team.sdr)}/limits", typed)

    assert response.status_code == 400
    html = text(response)
    assert [field_value(html, name) for name in ("requests_per_second", "request_burst", "live_holds")] == [
        "0",
        "lots",
        "7",
    ]
    burst = limit_row(html, "request_burst")
    assert 'aria-invalid="true"' in burst and "Enter a number, or leave it empty to inherit." in burst
    assert "Between 0.01 and 10000." in limit_row(html, "requests_per_second")
    assert 'aria-invalid="true"' not in limit_row(html, "live_holds")
    assert limits_of(team.sdr) == dict.fromkeys(INSTALLATION)  # nothing saved, not even the good one
    assert not AuditRecord.objects.filter(event_type=AuditEvent.AGENT_LIMITS_UPDATED).exists()


@pytest.mark.parametrize("who", ["member", "viewer"])
def test_approvers_and_viewers_cannot_set_limits(team, who):
    person = signed_in(getattr(team, who))
    assert person.post(f"{page(team.sdr)}/limits", {**EVERY_BLANK, "live_holds": "1"}).status_code == 403
    assert person.post(DEFAULTS, {**EVERY_BLANK, "live_holds": "1"}).status_code == 403
    assert limits_of(team.sdr)["live_holds"] is None
    assert Workspace.objects.get(pk=team.workspace.pk).limit_live_holds is None
    assert 'data-testid="limits-form"' not in text(person.get(DEFAULTS))


def test_another_workspaces_agent_is_not_found_and_limit_posts_need_a_csrf_token(team):
    owner = signed_in(team.owner)
    assert owner.post(f"{AGENTS}/{team.rival.public_id}/limits", {"live_holds": "1"}).status_code == 404
    assert signed_in(team.outsider).post(f"{page(team.sdr)}/limits", {"live_holds": "1"}).status_code == 404
    assert signed_in(team.outsider).post(DEFAULTS, {"live_holds": "1"}).status_code == 404
    strict = signed_in(team.owner, enforce_csrf_checks=True)
    assert strict.post(f"{page(team.sdr)}/limits", {**EVERY_BLANK, "live_holds": "1"}).status_code == 403
    assert strict.post(DEFAULTS, {**EVERY_BLANK, "live_holds": "1"}).status_code == 403
    assert limits_of(team.sdr)["live_holds"] is None and limits_of(team.rival)["live_holds"] is None
    assert Workspace.objects.get(pk=team.workspace.pk).limit_live_holds is None


# --- The workspace's defaults ----------------------------------------------------------------------------


def test_everyone_reads_the_default_limits_reached_from_the_agents_page(team):
    Workspace.objects.filter(pk=team.workspace.pk).update(limit_request_burst=90)
    viewer = signed_in(team.viewer)
    assert f'href="{DEFAULTS}"' in text(viewer.get(AGENTS))

    html = text(viewer.get(DEFAULTS))

    assert "Default limits for agents" in html
    assert (origin(html, "request_burst"), value_in_force(html, "request_burst")) == ("workspace", "90")
    assert origin(html, "live_holds") == "installation"
    assert value_in_force(html, "live_holds") == f"{INSTALLATION['live_holds']:,}"
    assert 'data-testid="limits-form"' not in html and "Owners and admins set these." in html


def test_an_admin_sets_the_defaults_that_agents_without_their_own_inherit(team):
    Agent.objects.filter(pk=team.exec_assistant.pk).update(limit_live_holds=9)
    admin = signed_in(team.admin)

    response = admin.post(DEFAULTS, {**EVERY_BLANK, "live_holds": "25", "requests_per_second": "4"})

    assert response.status_code == 302 and response["Location"] == DEFAULTS
    workspace = Workspace.objects.get(pk=team.workspace.pk)
    assert (workspace.limit_live_holds, workspace.limit_requests_per_second) == (25, 4.0)
    (row,) = AuditRecord.objects.filter(event_type=AuditEvent.WORKSPACE_LIMITS_UPDATED)
    assert row.actor_user == "adam@acme.test" and row.details["changes"]["live_holds"] == [None, 25]
    inherits = text(admin.get(page(team.sdr)))
    assert (origin(inherits, "live_holds"), value_in_force(inherits, "live_holds")) == ("workspace", "25")
    assert 'placeholder="inherit: 25"' in inherits
    own = text(admin.get(page(team.exec_assistant)))
    assert (origin(own, "live_holds"), value_in_force(own, "live_holds")) == ("agent", "9")


def test_a_refused_default_is_shown_beside_its_field(team):
    response = signed_in(team.owner).post(
        DEFAULTS, {**EVERY_BLANK, "searches_per_minute": "0", "live_holds": "2"}
    )
    assert response.status_code == 400
    html = text(response)
    assert "Between 1 and 100000." in limit_row(html, "searches_per_minute")
    assert field_value(html, "searches_per_minute") == "0" and field_value(html, "live_holds") == "2"
    assert Workspace.objects.get(pk=team.workspace.pk).limit_live_holds is None
