"""Each limit in force with where it comes from (the agent, its workspace's default, the installation),
and the live holds a pause with its holds would release."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.conf import settings

from bookings.engine import hold_commit, hold_create, hold_release
from guardrails.selectors import (
    Origin,
    agent_limit_settings,
    agent_usage,
    workspace_limit_settings,
    workspace_releasable_holds,
)
from tests.dashboard.pages_helpers import actor, future_day, make_calendar, make_team, span_on
from workspaces.limits import agent_limits
from workspaces.models import Agent, AgentUsage, Workspace


@pytest.fixture
def team(db, django_user_model):
    return make_team(django_user_model)


def by_name(rows):
    return {row.name: row for row in rows}


def test_each_limit_says_whether_the_agent_sets_it_or_inherits_it_and_from_where(team):
    Workspace.objects.filter(pk=team.workspace.pk).update(limit_live_holds=40, limit_bookings_per_day=500)
    Agent.objects.filter(pk=team.sdr.pk).update(limit_live_holds=5, limit_requests_per_second=2.5)
    workspace = Workspace.objects.get(pk=team.workspace.pk)
    agent = Agent.objects.get(pk=team.sdr.pk)

    rows = by_name(agent_limit_settings(agent, workspace))

    assert (rows["live_holds"].value, rows["live_holds"].own, rows["live_holds"].inherited) == (5, 5, 40)
    assert rows["live_holds"].origin == Origin.AGENT
    assert rows["requests_per_second"].origin == Origin.AGENT and rows["requests_per_second"].value == 2.5
    assert rows["bookings_per_day"].origin == Origin.WORKSPACE
    assert (rows["bookings_per_day"].value, rows["bookings_per_day"].own) == (500, None)
    searches = settings.AGENT_LIMIT_DEFAULTS["searches_per_minute"]
    assert rows["searches_per_minute"].origin == Origin.INSTALLATION
    assert rows["searches_per_minute"].value == rows["searches_per_minute"].inherited == searches
    # What binds is what the request path enforces, limit for limit.
    assert {name: row.value for name, row in rows.items()} == agent_limits(agent, workspace).as_dict()

    defaults = by_name(workspace_limit_settings(workspace))
    assert (defaults["live_holds"].value, defaults["live_holds"].origin) == (40, Origin.WORKSPACE)
    assert defaults["live_holds"].inherited == settings.AGENT_LIMIT_DEFAULTS["live_holds"]
    assert defaults["request_burst"].origin == Origin.INSTALLATION and defaults["request_burst"].own is None


def test_live_holds_count_each_live_hold_once_in_the_workspace_only(team):
    calendar, other = make_calendar(team.workspace), make_calendar(team.workspace, "Second")
    rival_calendar = make_calendar(team.other_workspace)
    day, sdr, boss = future_day(3), actor(team.sdr), actor(team.exec_assistant)
    # One hold on two calendars counts once.
    hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(9)), also_calendars=[other])
    hold_create(actor=boss, calendar=calendar, span=span_on(day, time(10)))
    committed = hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(11)))
    hold_commit(actor=sdr, calendar=calendar, hold_token=committed.hold_token or "")
    released = hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(12)))
    hold_release(actor=sdr, hold_id=released.primary.hold_id, hold_token=released.hold_token or "")
    hold_create(actor=actor(team.rival), calendar=rival_calendar, span=span_on(day, time(9)))

    assert workspace_releasable_holds(team.workspace) == 2
    assert agent_usage(team.sdr).live_holds == 1


def test_bookings_today_are_the_usage_rows_count_of_today_only(team):
    today = datetime.now(UTC).date()
    AgentUsage.objects.filter(agent=team.sdr).update(day=today, bookings_on_day=7)
    AgentUsage.objects.filter(agent=team.exec_assistant).update(
        day=today - timedelta(days=1), bookings_on_day=9
    )

    assert agent_usage(team.sdr).bookings_today == 7
    assert agent_usage(team.exec_assistant).bookings_today == 0  # yesterday's count is not today's
