"""Notices of limits met: the agents page names each agent and the limits it met lately in words, linking
to its page; the agent's page shows its own. Owners and admins dismiss them (they stay on record)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guardrails.models import LimitNotice
from tests.dashboard.pages_helpers import make_team, signed_in, text
from workspaces.models import Agent

AGENTS = "/w/acme/agents"


@pytest.fixture
def team(db, django_user_model):
    return make_team(django_user_model)


def notice(agent: Agent, limit: str, days_ago: int = 0) -> LimitNotice:
    day = datetime.now(UTC).date() - timedelta(days=days_ago)
    return LimitNotice.objects.create(workspace=agent.workspace, agent=agent, limit=limit, day=day)


def notices_box(html: str) -> str:
    start = html.index('data-testid="limit-notices"')
    return html[start : html.index("</section>", start)]


def open_ones() -> list[tuple[str, str]]:
    rows = LimitNotice.objects.filter(dismissed_at__isnull=True).order_by("agent__slug", "limit")
    return [(n.agent.slug, n.limit) for n in rows]


def test_the_agents_page_names_the_agent_and_the_limit_in_words(team):
    notice(team.sdr, "live_holds", days_ago=1)
    notice(team.sdr, "requests")
    notice(team.exec_assistant, "bookings_per_day", days_ago=3)
    notice(team.rival, "requests")  # another workspace's
    notice(team.exec_assistant, "searches").delete()  # gone
    dismissed = notice(team.exec_assistant, "in_flight")
    LimitNotice.objects.filter(pk=dismissed.pk).update(dismissed_at=datetime.now(UTC))
    notice(team.exec_assistant, "searches", days_ago=9)  # older than a week: history

    box = notices_box(text(signed_in(team.member).get(AGENTS)))

    assert "SDR bot reached its request rate today and its live holds at once yesterday." in box
    long_ago = (datetime.now(UTC).date() - timedelta(days=3)).strftime("%a %-d %b")
    assert f"Exec assistant reached its bookings per day on {long_ago}." in box
    assert "Rival" not in box and "in progress" not in box and "searches" not in box
    assert f'href="{AGENTS}/{team.sdr.public_id}#limits"' in box
    assert "Dismiss" not in box  # an approver reads them


def test_the_agents_own_page_shows_only_its_notices(team):
    notice(team.sdr, "searches")
    notice(team.exec_assistant, "requests")
    box = notices_box(text(signed_in(team.admin).get(f"{AGENTS}/{team.sdr.public_id}")))
    assert "SDR bot reached its searches per minute today." in box and "Exec assistant" not in box
    assert 'data-testid="dismiss-form"' in box and "csrfmiddlewaretoken" in box
    assert 'data-testid="limit-notices"' not in text(
        signed_in(team.admin).get(f"{AGENTS}/{team.rival.public_id}")
    )


def test_no_notices_no_box(team):
    assert 'data-testid="limit-notices"' not in text(signed_in(team.owner).get(AGENTS))


@pytest.mark.parametrize("who", ["owner", "admin"])
def test_owners_and_admins_dismiss_one_agents_notices(team, who):
    notice(team.sdr, "requests")
    notice(team.sdr, "live_holds", days_ago=1)
    notice(team.exec_assistant, "requests")
    notice(team.rival, "requests")

    response = signed_in(getattr(team, who)).post(
        "/w/acme/notices/dismiss", {"agent": team.sdr.public_id, "next": AGENTS}, follow=True
    )

    assert response.redirect_chain == [(AGENTS, 302)]
    assert "Dismissed 2 notices. They stay on record." in text(response)
    assert open_ones() == [("exec-assistant", "requests"), ("rival", "requests")]
    assert LimitNotice.objects.count() == 4  # still on record
    assert "SDR bot reached" not in notices_box(text(response))


def test_without_an_agent_every_notice_of_the_workspace_is_dismissed(team):
    notice(team.sdr, "requests")
    notice(team.exec_assistant, "requests")
    notice(team.rival, "requests")
    response = signed_in(team.owner).post("/w/acme/notices/dismiss")
    assert response.status_code == 302 and response["Location"] == AGENTS
    assert open_ones() == [("rival", "requests")]


def test_approvers_viewers_outsiders_and_forged_posts_dismiss_nothing(team):
    notice(team.sdr, "requests")
    assert signed_in(team.member).post("/w/acme/notices/dismiss").status_code == 403
    assert signed_in(team.outsider).post("/w/acme/notices/dismiss").status_code == 404
    owner = signed_in(team.owner)
    assert owner.post("/w/acme/notices/dismiss", {"agent": team.rival.public_id}).status_code == 404
    assert owner.post("/w/acme/notices/dismiss", {"agent": "agt_\x00"}).status_code == 404
    assert signed_in(team.owner, enforce_csrf_checks=True).post("/w/acme/notices/dismiss").status_code == 403
    assert open_ones() == [("sdr", "requests")]
