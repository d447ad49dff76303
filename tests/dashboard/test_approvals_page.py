"""The approval queue: pages, the live partial, roles, CSRF, isolation and race-safe decisions."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import Role
from approvals.models import Approval
from approvals.services import approval_request
from tests.accounts.helpers import make_person
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace


@pytest.fixture
def agent(db):
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    return Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr-bot", priority=100, max_priority=100
    )


def ask(agent, summary="Send the proposal to Dana", evidence=None):
    actor = Actor(workspace=agent.workspace, agent=agent)
    return approval_request(actor=actor, summary=summary, evidence=evidence or {"why": "she asked"})


def test_the_queue_lists_pending_requests_newest_first_with_agent_age_and_expiry(client, agent):
    ask(agent, "First request")
    ask(agent, "Second request")
    client.force_login(make_person("olivia@acme.test"))
    html = client.get("/w/acme/approvals").content.decode()
    assert html.index("Second request") < html.index("First request")
    assert "SDR bot" in html and "data-countdown" in html


def test_the_htmx_partial_is_just_the_table(client, agent):
    ask(agent)
    client.force_login(make_person("olivia@acme.test"))
    partial = client.get("/w/acme/approvals", HTTP_HX_REQUEST="true").content.decode()
    assert "Send the proposal to Dana" in partial
    assert "<html" not in partial and "sidebar" not in partial


def test_an_empty_queue_says_so(client, agent):
    client.force_login(make_person("olivia@acme.test"))
    assert "Nothing waiting for you" in client.get("/w/acme/approvals").content.decode()


def test_evidence_is_escaped_not_executed(client, agent):
    approval = ask(agent, evidence={"note": "<script>alert(1)</script>", "<b>key</b>": [1, True, None]})
    client.force_login(make_person("olivia@acme.test"))
    html = client.get(f"/w/acme/approvals/{approval.public_id}").content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;key&lt;/b&gt;" in html


def test_an_approver_may_decide_and_the_decision_records_who(client, agent):
    approval = ask(agent)
    member = make_person("mo@acme.test", role=Role.APPROVER)
    client.force_login(member)
    response = client.post(
        f"/w/acme/approvals/{approval.public_id}/decide",
        {"decision": "deny", "note": "Not yet", "confirmed": "yes"},
    )
    assert response.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_email, approval.note) == (
        "denied",
        "mo@acme.test",
        "Not yet",
    )


def test_the_second_person_to_decide_is_told_who_won(client, agent):
    approval = ask(agent)
    first, second = make_person("ann@acme.test"), make_person("bob@acme.test", role=Role.APPROVER)
    client.force_login(first)
    client.post(f"/w/acme/approvals/{approval.public_id}/decide", {"decision": "approve", "confirmed": "yes"})
    other = Client()
    other.force_login(second)
    page = other.post(
        f"/w/acme/approvals/{approval.public_id}/decide",
        {"decision": "deny", "confirmed": "yes"},
        follow=True,
    )
    assert "Already approved by ann@acme.test" in page.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by_email == "ann@acme.test"


def test_another_workspaces_person_gets_404_everywhere(client, agent):
    approval = ask(agent)
    client.force_login(make_person("eve@globex.test", workspace_slug="globex"))
    assert client.get("/w/acme/approvals").status_code == 404
    assert client.get(f"/w/acme/approvals/{approval.public_id}").status_code == 404
    assert (
        client.post(f"/w/acme/approvals/{approval.public_id}/decide", {"decision": "approve"}).status_code
        == 404
    )
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_an_approval_id_from_another_workspace_is_404_even_for_a_member_here(client, agent):
    globex = Workspace.objects.create(slug="globex", name="Globex")
    other_agent = Agent.objects.create(workspace=globex, name="X", slug="x", priority=1, max_priority=1)
    foreign = ask(other_agent)
    client.force_login(make_person("olivia@acme.test"))
    assert client.get(f"/w/acme/approvals/{foreign.public_id}").status_code == 404
    assert (
        client.post(f"/w/acme/approvals/{foreign.public_id}/decide", {"decision": "approve"}).status_code
        == 404
    )


def test_signed_out_people_are_sent_to_sign_in_and_cannot_decide(client, agent):
    approval = ask(agent)
    assert client.get("/w/acme/approvals").url.startswith("/auth/sign-in")
    client.post(f"/w/acme/approvals/{approval.public_id}/decide", {"decision": "approve", "confirmed": "yes"})
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_deciding_needs_the_csrf_token(agent):
    approval = ask(agent)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(make_person("olivia@acme.test"))
    assert (
        strict.post(
            f"/w/acme/approvals/{approval.public_id}/decide", {"decision": "approve", "confirmed": "yes"}
        ).status_code
        == 403
    )
    assert Approval.objects.get().status == "pending"
