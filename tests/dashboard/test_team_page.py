"""The team page: who sees and may do what, forms and their errors, CSRF, and another workspace's 404.

The team (tests/dashboard/pages_helpers.py): olivia owns `acme`, adam is its admin, mo its approver; vic,
added here, its viewer; otto owns `globex`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils.html import escape

from accounts.models import Invitation, Membership, Role
from accounts.roles import GRANTS, Permission
from audit.models import AuditRecord
from tests.dashboard.pages_helpers import make_team, signed_in, text


@pytest.fixture
def team(django_user_model: Any, settings: Any) -> Any:
    settings.DASHBOARD_BASE_URL = "http://testserver"
    team = make_team(django_user_model)
    team.viewer = django_user_model.objects.create_user(username="vic@acme.test", email="vic@acme.test")
    Membership.objects.create(user=team.viewer, workspace=team.workspace, role=Role.VIEWER)
    return team


def role_of(user: Any) -> str:
    return Membership.objects.get(user=user, workspace__slug="acme").role


def membership_id(user: Any) -> int:
    return Membership.objects.get(user=user, workspace__slug="acme").pk


def test_the_owner_sees_members_with_roles_invitations_and_every_form(team, mailoutbox):
    owner = signed_in(team.owner)
    owner.post("/w/acme/team/invitations", {"email": "nina@acme.test", "role": "approver"})

    html = text(owner.get("/w/acme/team"))

    rows = re.findall(r'data-testid="member-row" data-email="([^"]+)"', html)
    assert rows == ["olivia@acme.test", "adam@acme.test", "mo@acme.test", "vic@acme.test"]  # by role
    assert 'data-testid="invite-form"' in html and html.count('data-testid="role-select"') == 3
    assert "the only owner" in html  # olivia's own row offers no way to leave
    assert re.search(r'data-testid="invitation-row" data-email="nina@acme.test"', html)
    assert "expires in 6\xa0days" in html or "expires in 1\xa0week" in html
    assert 'href="/w/acme/team" class="active"' in html  # the owner's nav entry


@pytest.mark.parametrize("who", ["admin", "member", "viewer"])
def test_others_read_the_team_and_the_roles_from_the_nav_but_get_no_forms(team, who):
    html = text(signed_in(getattr(team, who)).get("/w/acme/team"))

    page = html.split('id="content"')[1].split("</main>")[0]
    own = membership_id(getattr(team, who))
    assert re.findall(r'<form method="post" action="([^"]+)"', page) == [f"/w/acme/team/members/{own}/remove"]
    assert ">Leave</button>" in page  # their own row's one action
    assert 'data-testid="invitation-table"' not in html and "nina" not in html
    assert 'data-testid="your-role"' in html and 'data-testid="roles-explainer"' in html
    assert 'aria-current="page">Team</a>' in html  # every role finds the team in the nav
    role_link = re.search(r'data-testid="your-role-link">(\w+)</a>', html)
    assert role_link and role_link.group(1) == role_of(getattr(team, who))
    assert 'href="/w/acme/team#roles"' in html


def test_the_roles_explainer_is_the_permission_table(team):
    html = text(signed_in(team.viewer).get("/w/acme/team"))
    grid = html.split('class="role-grid"')[1].split("</table>")[0]
    for permission in Permission:
        label = escape(permission.label)
        row = grid.split(f'<th scope="row">{label}</th>')[1].split("</tr>")[0]
        shown = re.findall(r'class="team-sr">(yes|no)<', row)
        assert shown == ["yes" if permission in GRANTS[role] else "no" for role in Role.values], permission


@pytest.mark.parametrize("who", ["admin", "member", "viewer"])
def test_only_owners_invite_change_roles_and_remove(team, who, mailoutbox):
    person = signed_in(getattr(team, who))
    target = membership_id(team.viewer if who != "viewer" else team.member)

    assert (
        person.post("/w/acme/team/invitations", {"email": "nina@acme.test", "role": "owner"}).status_code
        == 403
    )
    assert person.post(f"/w/acme/team/members/{target}/role", {"role": "owner"}).status_code == 403
    assert person.post(f"/w/acme/team/members/{target}/remove").status_code == 403

    assert not Invitation.objects.exists() and not mailoutbox
    assert Membership.objects.filter(workspace__slug="acme").count() == 4
    assert role_of(team.viewer) == "viewer" and role_of(team.member) == "approver"


def test_another_workspaces_people_get_404_everywhere(team):
    outsider = signed_in(team.outsider)
    invitation = Invitation.objects.create(
        workspace=team.workspace,
        email="nina@acme.test",
        role="viewer",
        invited_by_email="x",
        sent_at="2026-01-01T00:00Z",
    )
    target = membership_id(team.viewer)
    assert outsider.get("/w/acme/team").status_code == 404
    for path in [
        "/w/acme/team/invitations",
        f"/w/acme/team/invitations/{invitation.pk}/resend",
        f"/w/acme/team/invitations/{invitation.pk}/revoke",
        f"/w/acme/team/members/{target}/role",
        f"/w/acme/team/members/{target}/remove",
    ]:
        assert outsider.post(path, {"email": "x@globex.test", "role": "owner"}).status_code == 404, path
    # Nor can globex's owner reach acme's rows through their own workspace's URLs.
    assert outsider.post(f"/w/globex/team/members/{target}/role", {"role": "viewer"}).status_code == 404
    assert outsider.post(f"/w/globex/team/invitations/{invitation.pk}/revoke").status_code == 404
    assert role_of(team.viewer) == "viewer" and Invitation.objects.get().revoked_at is None


def test_every_change_needs_the_csrf_token(team, mailoutbox):
    strict = signed_in(team.owner, enforce_csrf_checks=True)
    target = membership_id(team.viewer)
    assert (
        strict.post("/w/acme/team/invitations", {"email": "nina@acme.test", "role": "viewer"}).status_code
        == 403
    )
    assert strict.post(f"/w/acme/team/members/{target}/role", {"role": "admin"}).status_code == 403
    assert strict.post(f"/w/acme/team/members/{target}/remove").status_code == 403
    assert not Invitation.objects.exists() and role_of(team.viewer) == "viewer"


def test_the_invite_form_reports_bad_input_on_the_field(team, mailoutbox):
    owner = signed_in(team.owner)

    bad = owner.post("/w/acme/team/invitations", {"email": "not-an-address", "role": "viewer"})
    assert bad.status_code == 400 and "Enter a valid email address." in text(bad)
    unknown_role = owner.post("/w/acme/team/invitations", {"email": "nina@acme.test", "role": "member"})
    assert unknown_role.status_code == 400 and "Select a valid choice" in text(unknown_role)
    member = owner.post("/w/acme/team/invitations", {"email": "MO@acme.test", "role": "viewer"})
    assert member.status_code == 409 and "mo@acme.test is already a member of Acme." in text(member)
    assert 'aria-invalid="true"' in text(member)
    assert not Invitation.objects.exists() and not mailoutbox


def test_the_owner_invites_resends_and_revokes_from_the_page(team, mailoutbox):
    owner = signed_in(team.owner)
    page = owner.post("/w/acme/team/invitations", {"email": "nina@acme.test", "role": "admin"}, follow=True)
    assert "Invited nina@acme.test as admin." in text(page)
    invitation = Invitation.objects.get()

    again = owner.post(f"/w/acme/team/invitations/{invitation.pk}/resend", follow=True)
    assert "Sent a new link to nina@acme.test" in text(again) and len(mailoutbox) == 2
    revoked = owner.post(f"/w/acme/team/invitations/{invitation.pk}/revoke", follow=True)
    assert "Revoked the invitation of nina@acme.test" in text(revoked)
    assert 'data-testid="invitations-empty"' in text(revoked)
    twice = owner.post(f"/w/acme/team/invitations/{invitation.pk}/revoke", follow=True)
    assert "already accepted or revoked" in text(twice)
    assert owner.post("/w/acme/team/invitations/999999/resend").status_code == 404


def test_the_owner_changes_roles_but_not_their_own_as_the_last_owner(team):
    owner = signed_in(team.owner)

    page = owner.post(
        f"/w/acme/team/members/{membership_id(team.viewer)}/role", {"role": "approver"}, follow=True
    )
    assert "vic@acme.test is now approver." in text(page) and role_of(team.viewer) == "approver"
    refused = owner.post(
        f"/w/acme/team/members/{membership_id(team.owner)}/role", {"role": "admin"}, follow=True
    )
    assert "olivia@acme.test is the only owner of Acme" in text(refused) and role_of(team.owner) == "owner"
    nonsense = owner.post(
        f"/w/acme/team/members/{membership_id(team.viewer)}/role", {"role": "king"}, follow=True
    )
    assert "Choose a role" in text(nonsense) and role_of(team.viewer) == "approver"
    assert AuditRecord.objects.filter(event_type="team.member.role_change.rejected").count() == 1


def test_a_viewer_leaves_and_an_owner_removes(team):
    viewer = signed_in(team.viewer)
    left = viewer.post(f"/w/acme/team/members/{membership_id(team.viewer)}/remove")
    assert left.status_code == 302 and left["Location"] == "/"
    assert viewer.get("/w/acme/team").status_code == 404

    owner = signed_in(team.owner)
    removed = owner.post(f"/w/acme/team/members/{membership_id(team.admin)}/remove", follow=True)
    assert "Removed adam@acme.test from Acme." in text(removed)
    assert list(
        Membership.objects.filter(workspace__slug="acme").values_list("user__email", flat=True).order_by("id")
    ) == [
        "olivia@acme.test",
        "mo@acme.test",
    ]
    assert [
        r.details["left"] for r in AuditRecord.objects.filter(event_type="team.member.removed").order_by("id")
    ] == [
        True,
        False,
    ]


def test_a_viewer_reads_but_does_not_decide_or_manage(team):
    """What the pages ask the permission table, spot-checked for the two read-only roles."""
    viewer, approver, admin = signed_in(team.viewer), signed_in(team.member), signed_in(team.admin)
    for person in (viewer, approver):
        assert person.get("/w/acme/agents").status_code == 200
        assert person.post("/w/acme/agents", {"name": "Rogue", "priority": 100}).status_code == 403
        assert person.get("/w/acme/inboxes").status_code == 403
    assert admin.get("/w/acme/inboxes").status_code == 200
    assert ">Inboxes</a>" not in text(viewer.get("/w/acme/agents"))
