"""The dashboard's metrics page: counts from the workspace's own audit trail, per window."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from bookings import engine
from bookings.spans import Span
from dashboard.views.metrics import nice_ceiling
from tests.accounts.helpers import make_person
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace


@pytest.fixture
def activity(db):
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    low = Agent.objects.create(workspace=workspace, name="Low", slug="low", priority=100, max_priority=100)
    high = Agent.objects.create(workspace=workspace, name="High", slug="high", priority=500, max_priority=500)
    calendar = engine.calendar_create(actor=Actor(workspace=workspace, agent=low), name="Sales")
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=3)
    span = Span(start, start + timedelta(minutes=30))
    low_actor, high_actor = Actor(workspace=workspace, agent=low), Actor(workspace=workspace, agent=high)
    held = engine.hold_create(actor=low_actor, calendar=calendar, span=span)
    with pytest.raises(engine.SlotConflict):
        engine.hold_create(actor=Actor(workspace=workspace, agent=low), calendar=calendar, span=span)
    engine.hold_create(actor=high_actor, calendar=calendar, span=span)  # evicts
    other = Span(span.end, span.end + timedelta(minutes=30))
    second = engine.hold_create(actor=low_actor, calendar=calendar, span=other)
    assert second.hold_token is not None
    engine.hold_commit(actor=low_actor, calendar=calendar, hold_token=second.hold_token)
    return workspace, held


def test_it_counts_holds_commits_conflicts_and_preemptions(client, activity):
    client.force_login(make_person("olivia@acme.test"))
    page = client.get("/w/acme/metrics")
    assert page.status_code == 200
    charts = {chart.label: chart.total for chart in page.context["charts"]}
    assert charts == {"Holds": 3, "Commits": 1, "Conflicts": 1, "Preemptions": 1, "Expiries": 0}
    assert page.context["conversion"] == 33
    html = page.content.decode()
    assert "<svg" in html and "33%" in html
    assert client.get("/w/acme/metrics?window=day").context["charts"][0].total == 3


def test_an_empty_workspace_shows_an_empty_state(client, db):
    client.force_login(make_person("olivia@quiet.test", workspace_slug="quiet"))
    assert "No agent activity in this window" in client.get("/w/quiet/metrics").content.decode()


def test_another_workspace_cannot_see_the_metrics(client, activity):
    client.force_login(make_person("eve@globex.test", workspace_slug="globex"))
    assert client.get("/w/acme/metrics").status_code == 404


def test_charts_have_axes_tooltips_and_a_table_of_their_numbers(client, activity):
    client.force_login(make_person("olivia@acme.test"))
    page = client.get("/w/acme/metrics")
    html = page.content.decode()
    holds = page.context["charts"][0]
    assert (holds.peak, holds.scale, holds.y_ticks) == (3, 5, [5, 0])
    # The count scale and time ticks around each chart.
    assert html.count('<div class="chart-y" aria-hidden="true"><span>') == 5
    assert '<div class="chart-x" aria-hidden="true"><span>−60 min</span><span>−45 min</span>' in html
    assert "<span>now</span>" in html
    # A tooltip for every bucket, empty ones too; the newest bucket holds this test's activity.
    titles = re.findall(r"<title>(\d+ holds?), (\d\d:\d\d–\d\d:\d\d) UTC</title>", html)
    assert len(titles) == 12 and titles[-1][0] == "3 holds" and titles[0][0] == "0 holds"
    assert 'aria-label="Holds: 3 holds in this window, the most (3) at ' in html
    # Every number in one table, oldest first.
    table = html[html.index('data-testid="chart-table"') :]
    rows = re.findall(r'<tr><th scope="row" class="nowrap">([^<]+)</th>((?:<td[^>]*>\d+</td>)+)</tr>', table)
    assert len(rows) == 12 and re.findall(r">(\d+)<", rows[-1][1]) == ["3", "1", "1", "1", "0"]
    assert "style=" not in html[html.index("<svg") : html.rindex("</svg>")]  # CSP: no inline style
    day = client.get("/w/acme/metrics?window=day").content.decode()
    assert len(re.findall(r"<title>\d+ (?:hold|holds), ", day)) == 24 and "<span>−24 h</span>" in day


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1), (1, 1), (2, 2), (3, 5), (5, 5), (6, 10), (11, 20), (51, 100), (120, 200)]
)
def test_the_count_scale_rounds_up_to_a_readable_number(value, ceiling):
    assert nice_ceiling(value) == ceiling
