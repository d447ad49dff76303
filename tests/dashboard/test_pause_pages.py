"""The emergency stop in the dashboard: owners pause one agent or every agent after a confirm step that
offers to release live holds, and resume them; everyone else sees the state, not the buttons. While the
workspace is paused every workspace page says so."""

from __future__ import annotations

import re
from datetime import time

import pytest
from django.test import Client

from accounts.models import Membership, Role
from approvals.models import Approval
from approvals.services import approval_request
from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.engine import hold_create
from bookings.models import Reservation, ReservationStatus
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    make_team,
    signed_in,
    span_on,
    text,
)
from workspaces.keys import api_key_create, verified_keys
from workspaces.models import Agent, Workspace

AGENTS = "/w/acme/agents"


@pytest.fixture
def team(db, django_user_model):
    team = make_team(django_user_model)
    team.viewer = django_user_model.objects.create_user(username="vic@acme.test", email="vic@acme.test")
    Membership.objects.create(user=team.viewer, workspace=team.workspace, role=Role.VIEWER)
    yield team
    verified_keys.clear()


def page(agent: Agent) -> str:
    return f"{AGENTS}/{agent.public_id}"


def csrf_token(html: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert match is not None
    return match.group(1)


def api_write(raw_key: str) -> int:
    """What the agent API answers the agent's write (the dashboard and the API share one process here)."""
    return (
        Client()
        .post(
            "/v1/calendars",
            {"name": "Paused or not"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {raw_key}",
        )
        .status_code
    )


def refreshed(agent: Agent) -> Agent:
    return Agent.objects.get(pk=agent.pk)


def audited(event: AuditEvent) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(event_type=event).order_by("id"))


# --- One agent -------------------------------------------------------------------------------------------


def test_an_owner_pauses_an_agent_through_the_confirm_step_and_its_writes_are_refused(team):
    _, raw = api_key_create(agent=team.sdr, scopes=["calendars:write"])
    assert api_write(raw) == 201
    owner = signed_in(team.owner, enforce_csrf_checks=True)

    html = text(owner.get(page(team.sdr)))
    assert 'data-testid="pause-agent"' in html and 'data-testid="pause-confirm"' not in html
    assert f'href="{page(team.sdr)}?confirm=pause#pause"' in html
    # The one click opens the confirm step; nothing is paused yet.
    confirm = text(owner.get(page(team.sdr) + "?confirm=pause"))
    step = confirm[
        confirm.index('data-testid="pause-confirm"') : confirm.index(
            "</section>", confirm.index("pause-confirm")
        )
    ]
    assert "Pause SDR bot?" in step and 'name="release_holds"' in step and "csrfmiddlewaretoken" in step
    assert f'action="{page(team.sdr)}/pause"' in step
    assert 'data-testid="pause-agent"' not in confirm  # the step replaces the button
    assert refreshed(team.sdr).paused_at is None

    response = owner.post(f"{page(team.sdr)}/pause", {"csrfmiddlewaretoken": csrf_token(confirm)})

    assert response.status_code == 302 and response["Location"] == page(team.sdr)
    paused = refreshed(team.sdr)
    assert paused.paused_at is not None and paused.paused_by == "olivia@acme.test"
    assert refreshed(team.exec_assistant).paused_at is None
    (row,) = audited(AuditEvent.AGENT_PAUSED)
    assert row.actor_user == "olivia@acme.test" and row.details["release_holds"] is False
    assert api_write(raw) == 423
    after = text(owner.get(page(team.sdr)))
    assert "SDR bot is paused: its writes are refused from now on" in after
    assert 'data-testid="agent-paused"' in after and "olivia@acme.test paused it at" in after
    assert 'data-testid="resume-form"' in after and 'data-testid="pause-agent"' not in after


def test_the_confirm_step_can_release_the_agents_live_holds_too(team):
    calendar, day = make_calendar(team.workspace), future_day(3)
    mine = hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(9)))
    hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(10)))
    theirs = hold_create(actor=actor(team.exec_assistant), calendar=calendar, span=span_on(day, time(11)))
    owner = signed_in(team.owner)
    assert "Also release its live holds (2 now)" in text(owner.get(page(team.sdr) + "?confirm=pause"))

    response = owner.post(f"{page(team.sdr)}/pause", {"release_holds": "on"}, follow=True)

    assert "2 live holds released." in text(response)
    assert Reservation.objects.get(pk=mine.primary.pk).status == ReservationStatus.RELEASED
    assert not Reservation.objects.filter(agent=team.sdr, status=ReservationStatus.HELD).exists()
    assert Reservation.objects.get(pk=theirs.primary.pk).status == ReservationStatus.HELD
    (row,) = audited(AuditEvent.AGENT_PAUSED)
    assert row.details["release_holds"] is True


def test_a_hold_awaiting_an_approval_is_neither_counted_nor_released_by_the_pause(team):
    calendar, day = make_calendar(team.workspace), future_day(3)
    plain = hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(9)))
    gated = hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(10)))
    approval = approval_request(
        actor=actor(team.sdr), summary="Book it", evidence={}, hold_id=gated.primary.hold_id
    )
    hold_create(actor=actor(team.exec_assistant), calendar=calendar, span=span_on(day, time(11)))
    owner = signed_in(team.owner)
    assert "Also release its live holds (1 now)" in text(owner.get(page(team.sdr) + "?confirm=pause"))
    assert "Also release their live holds (2 now)" in text(owner.get(AGENTS + "?confirm=pause"))

    response = owner.post(f"{page(team.sdr)}/pause", {"release_holds": "on"}, follow=True)

    assert "1 live hold released." in text(response)
    assert Reservation.objects.get(pk=plain.primary.pk).status == ReservationStatus.RELEASED
    assert Reservation.objects.get(pk=gated.primary.pk).status == ReservationStatus.HELD
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_an_owner_resumes_a_paused_agent(team):
    _, raw = api_key_create(agent=team.sdr, scopes=["calendars:write"])
    owner = signed_in(team.owner)
    owner.post(f"{page(team.sdr)}/pause")
    assert api_write(raw) == 423
    # A paused agent offers Resume, not another pause.
    assert 'data-testid="pause-confirm"' not in text(owner.get(page(team.sdr) + "?confirm=pause"))

    response = owner.post(f"{page(team.sdr)}/resume", follow=True)

    assert "SDR bot is resumed: its writes work again." in text(response)
    assert refreshed(team.sdr).paused_at is None and refreshed(team.sdr).paused_by == ""
    (row,) = audited(AuditEvent.AGENT_RESUMED)
    assert row.actor_user == "olivia@acme.test"
    assert api_write(raw) == 201
    # Twice is said, not audited again.
    again = owner.post(f"{page(team.sdr)}/resume", follow=True)
    assert "SDR bot was not paused." in text(again) and len(audited(AuditEvent.AGENT_RESUMED)) == 1


def test_opening_the_pause_url_leads_to_the_confirm_step(team):
    response = signed_in(team.owner).get(f"{page(team.sdr)}/pause")
    assert response.status_code == 302 and response["Location"] == f"{page(team.sdr)}?confirm=pause"
    assert refreshed(team.sdr).paused_at is None


@pytest.mark.parametrize("who", ["admin", "member", "viewer"])
def test_only_owners_pause_and_resume_the_others_see_the_state(team, who):
    person = signed_in(getattr(team, who))
    html = text(person.get(page(team.sdr) + "?confirm=pause"))
    assert 'data-testid="pause-agent"' not in html and 'data-testid="pause-confirm"' not in html

    assert person.post(f"{page(team.sdr)}/pause").status_code == 403
    assert refreshed(team.sdr).paused_at is None and not audited(AuditEvent.AGENT_PAUSED)

    signed_in(team.owner).post(f"{page(team.sdr)}/pause")
    html = text(person.get(page(team.sdr)))
    assert 'data-testid="agent-paused"' in html and 'data-testid="resume-form"' not in html
    assert 'data-testid="paused-pill"' in text(person.get(AGENTS))
    assert person.post(f"{page(team.sdr)}/resume").status_code == 403
    assert refreshed(team.sdr).paused_at is not None


def test_another_workspaces_agent_is_not_found(team):
    owner = signed_in(team.owner)
    for action in ("pause", "resume"):
        assert owner.post(f"{AGENTS}/{team.rival.public_id}/{action}").status_code == 404
        # Nor can its own owner reach it through this workspace's address.
        assert signed_in(team.outsider).post(f"{page(team.sdr)}/{action}").status_code == 404
    assert refreshed(team.rival).paused_at is None and refreshed(team.sdr).paused_at is None


def test_pause_and_resume_posts_without_a_csrf_token_are_refused(team):
    owner = signed_in(team.owner, enforce_csrf_checks=True)
    for path in (f"{page(team.sdr)}/pause", "/w/acme/pause"):
        assert owner.post(path).status_code == 403
    assert refreshed(team.sdr).paused_at is None
    assert Workspace.objects.get(pk=team.workspace.pk).paused_at is None
    Agent.objects.filter(pk=team.sdr.pk).update(paused_at=team.workspace.created_at, paused_by="x")
    assert owner.post(f"{page(team.sdr)}/resume").status_code == 403
    assert refreshed(team.sdr).paused_at is not None


# --- The whole workspace ---------------------------------------------------------------------------------

WORKSPACE_PAGES = [
    "/w/acme/approvals",
    "/w/acme/calendars",
    "/w/acme/audit",
    "/w/acme/metrics",
    "/w/acme/agents",
    "/w/acme/settings/mail",
    "/w/acme/settings/limits",
    "/w/acme/team",
]


def test_an_owner_pauses_every_agent_and_every_workspace_page_says_so(team):
    keys = [
        api_key_create(agent=agent, scopes=["calendars:write"])[1]
        for agent in (team.sdr, team.exec_assistant)
    ]
    calendar, day = make_calendar(team.workspace), future_day(2)
    hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(9)))
    hold_create(actor=actor(team.exec_assistant), calendar=calendar, span=span_on(day, time(10)))
    owner = signed_in(team.owner, enforce_csrf_checks=True)
    listing = text(owner.get(AGENTS))
    assert (
        f'href="{AGENTS}?confirm=pause#pause"' in listing and 'data-testid="workspace-paused"' not in listing
    )

    confirm = text(owner.get(AGENTS + "?confirm=pause"))
    assert "Pause every agent in Acme?" in confirm and "any of its 2 agents" in confirm
    assert "Also release their live holds (2 now)" in confirm and 'action="/w/acme/pause"' in confirm
    response = owner.post(
        "/w/acme/pause", {"release_holds": "on", "csrfmiddlewaretoken": csrf_token(confirm)}, follow=True
    )

    assert "Every agent in Acme is paused" in text(response) and "2 live holds released." in text(response)
    workspace = Workspace.objects.get(pk=team.workspace.pk)
    assert workspace.paused_at is not None and workspace.paused_by == "olivia@acme.test"
    assert not Reservation.objects.filter(status=ReservationStatus.HELD).exists()
    (row,) = audited(AuditEvent.WORKSPACE_PAUSED)
    assert row.actor_user == "olivia@acme.test" and row.details["release_holds"] is True
    assert [api_write(raw) for raw in keys] == [423, 423]
    for who in (team.owner, team.admin, team.member, team.viewer):
        client = signed_in(who)
        for path in WORKSPACE_PAGES if who == team.owner else WORKSPACE_PAGES[:-1]:
            html = text(client.get(path))
            banner = html[html.index('data-testid="workspace-paused"') :]
            assert "Every agent in Acme is paused." in banner, (who, path)
            assert "olivia@acme.test paused them at" in banner
            assert ('data-testid="workspace-resume-form"' in html) == (who == team.owner), (who, path)
    # Another workspace is not paused, and says nothing of it.
    assert 'data-testid="workspace-paused"' not in text(signed_in(team.outsider).get("/w/globex/agents"))


def test_resuming_from_the_banner_goes_back_to_the_page_it_was_on(team):
    owner = signed_in(team.owner)
    owner.post("/w/acme/pause")
    html = text(owner.get("/w/acme/calendars"))
    assert 'name="next" value="/w/acme/calendars"' in html

    response = owner.post("/w/acme/resume", {"next": "/w/acme/calendars"})

    assert response.status_code == 302 and response["Location"] == "/w/acme/calendars"
    assert Workspace.objects.get(pk=team.workspace.pk).paused_at is None
    (row,) = audited(AuditEvent.WORKSPACE_RESUMED)
    assert row.actor_user == "olivia@acme.test"
    assert 'data-testid="workspace-paused"' not in text(owner.get("/w/acme/calendars"))


@pytest.mark.parametrize(
    "elsewhere", ["https://evil.example/w/acme/", "//evil.example/w/acme/", "/w/globex/agents"]
)
def test_resume_goes_back_only_to_this_workspaces_pages(team, elsewhere):
    owner = signed_in(team.owner)
    owner.post("/w/acme/pause")
    response = owner.post("/w/acme/resume", {"next": elsewhere})
    assert response.status_code == 302 and response["Location"] == AGENTS


def test_an_agent_paused_on_its_own_stays_paused_when_the_workspace_resumes(team):
    owner = signed_in(team.owner)
    owner.post(f"{page(team.sdr)}/pause")
    owner.post("/w/acme/pause")
    response = owner.post(f"{page(team.exec_assistant)}/pause", follow=True)
    assert "Exec assistant is paused" in text(response)
    owner.post(f"{page(team.exec_assistant)}/resume")
    resumed = text(owner.post(f"{page(team.sdr)}/resume", follow=True))
    assert "SDR bot is resumed, but the whole workspace is still paused." in resumed

    owner.post("/w/acme/resume")
    owner.post(f"{page(team.sdr)}/pause")
    owner.post("/w/acme/pause")
    owner.post("/w/acme/resume")
    assert refreshed(team.sdr).paused_at is not None


@pytest.mark.parametrize("who", ["admin", "member", "viewer"])
def test_only_owners_pause_or_resume_the_workspace(team, who):
    person = signed_in(getattr(team, who))
    assert 'data-testid="pause-all"' not in text(person.get(AGENTS))
    assert 'data-testid="pause-confirm"' not in text(person.get(AGENTS + "?confirm=pause"))
    assert person.post("/w/acme/pause").status_code == 403
    assert Workspace.objects.get(pk=team.workspace.pk).paused_at is None
    signed_in(team.owner).post("/w/acme/pause")
    assert person.post("/w/acme/resume").status_code == 403
    assert Workspace.objects.get(pk=team.workspace.pk).paused_at is not None
    assert not audited(AuditEvent.WORKSPACE_RESUMED)


def test_pausing_another_workspace_is_not_found(team):
    outsider = signed_in(team.outsider)
    assert outsider.post("/w/acme/pause").status_code == 404
    assert outsider.post("/w/acme/resume").status_code == 404
    assert Workspace.objects.get(pk=team.workspace.pk).paused_at is None
