"""Emails give a moment as a person reads it — "Wed 2 Dec 2026, 05:38 IST" in the recipient's own zone
when they told it, else UTC, named — never a raw ISO string."""

from __future__ import annotations

import re
from typing import Any

import pytest

from accounts.models import Membership, Profile, Role
from accounts.services import magic_link_request
from accounts.team import invitation_create
from approvals.notifications import approval_notify_owners
from approvals.services import approval_request
from tests.dashboard.pages_helpers import Team, actor, make_team
from workspaces.actor import Actor

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
HUMAN = r"\w{3} \d{1,2} \w{3} \d{4}, \d\d:\d\d"


@pytest.fixture
def team(db: None, django_user_model: Any) -> Team:
    return make_team(django_user_model)


def test_each_owner_reads_the_approvals_expiry_in_their_own_zone(
    team: Team, mailoutbox: Any, django_user_model: Any
) -> None:
    second = django_user_model.objects.create_user(username="sam@acme.test", email="sam@acme.test")
    Membership.objects.create(user=second, workspace=team.workspace, role=Role.OWNER)
    Profile.objects.create(user=team.owner, time_zone="Asia/Kolkata")
    approval = approval_request(actor=actor(team.sdr), summary="Send the proposal", evidence={})
    mailoutbox.clear()

    approval_notify_owners(approval.pk)

    bodies = {message.to[0]: message.body for message in mailoutbox}
    assert re.search(rf"it expires on {HUMAN} IST\.", bodies["olivia@acme.test"])
    assert re.search(rf"it expires on {HUMAN} UTC\.", bodies["sam@acme.test"])  # no zone told yet
    assert not any(ISO.search(body) for body in bodies.values())


def test_the_sign_in_link_says_when_it_expires(team: Team, mailoutbox: Any) -> None:
    Profile.objects.create(user=team.owner, time_zone="Europe/Berlin")

    magic_link_request(email="olivia@acme.test", ip=None)

    (message,) = mailoutbox
    assert re.search(rf"expires in \d+ minutes \({HUMAN} CET\)", message.body)
    assert not ISO.search(message.body)


def test_an_invitation_says_when_its_link_expires(team: Team, mailoutbox: Any) -> None:
    as_owner = Actor(workspace=team.workspace, agent=None, user_email=team.owner.email)
    invitation_create(actor=as_owner, by=team.owner, email="new@acme.test", role=Role.VIEWER)

    (message,) = mailoutbox
    assert re.search(rf"expires in 7 days \({HUMAN} UTC\)", message.body)
    assert not ISO.search(message.body)
