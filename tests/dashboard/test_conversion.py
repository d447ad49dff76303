"""Hold → booking conversion means one thing on the agents list and on the metrics page: holds that became
bookings ÷ holds placed; a booking made without a hold counts in neither."""

from __future__ import annotations

from datetime import time

from bookings.engine import booking_create, hold_commit, hold_create
from dashboard.viewmodels.conversion import (
    CONVERSION_DEFINITION,
    CONVERSION_EXCLUDES,
    conversion_percent,
)
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    signed_in,
    span_on,
    text,
)


def cell(html: str, agent_public_id: str, testid: str) -> str:
    row = html[html.index(f'data-agent="{agent_public_id}"') :]
    return row[row.index(f'data-testid="{testid}">') + len(f'data-testid="{testid}">') :].split("</td>")[0]


def test_conversion_is_none_without_holds_and_rounds_to_a_percent():
    assert conversion_percent(holds=0, commits_from_holds=0) is None
    assert conversion_percent(holds=3, commits_from_holds=1) == 33


def test_a_direct_booking_counts_on_neither_page(team):
    calendar = make_calendar(team.workspace)
    booking_create(actor=actor(team.sdr), calendar=calendar, span=span_on(future_day(3), time(9)))
    owner = signed_in(team.owner)

    agents = text(owner.get("/w/acme/agents"))
    sdr = team.sdr.public_id
    assert (cell(agents, sdr, "holds"), cell(agents, sdr, "commits")) == ("0", "1")
    assert "—" in cell(agents, sdr, "conversion")
    metrics = owner.get("/w/acme/metrics")
    assert metrics.context["conversion"] is None
    assert CONVERSION_DEFINITION in text(metrics)


def test_the_metrics_card_and_the_agents_list_agree(team):
    calendar = make_calendar(team.workspace)
    sdr, day = actor(team.sdr), future_day(3)
    held = hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(9)), ttl_seconds=600)
    assert held.hold_token is not None
    hold_commit(actor=sdr, calendar=calendar, hold_token=held.hold_token)
    hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(10)), ttl_seconds=600)
    hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(11)), ttl_seconds=600)
    booking_create(actor=sdr, calendar=calendar, span=span_on(day, time(12)))  # no hold: not counted
    owner = signed_in(team.owner)

    agents = text(owner.get("/w/acme/agents"))
    assert cell(agents, team.sdr.public_id, "conversion") == "33%"
    metrics = owner.get("/w/acme/metrics")
    assert metrics.context["conversion"] == 33
    html = text(metrics)
    assert 'data-testid="conversion">33%<' in html
    assert f">{CONVERSION_DEFINITION}, in this window</p>" in html and CONVERSION_EXCLUDES in html
    assert f"{CONVERSION_DEFINITION}, since the agent's first hold. {CONVERSION_EXCLUDES}" in agents
