"""The team services: invitations by magic link, role changes and removals, and the last-owner rule.

People: in workspace `acme` the owner olivia, the admin adam and the viewer vic; invitees are new
addresses at acme.test; otto owns `globex`.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from django.db import connection

from accounts.models import Invitation, MagicLink, Membership, Role
from accounts.team import (
    invitation_create,
    invitation_resend,
    invitation_revoke,
    member_remove,
    member_role_change,
)
from agentcal.errors import (
    AlreadyMember,
    InvalidRequest,
    InvitationNotPending,
    InvitationPending,
    InvitationThrottled,
    LastOwner,
    TeamChangeNotAllowed,
)
from audit.models import AuditRecord
from tests.accounts.helpers import ORIGIN, make_person
from workspaces.actor import Actor
from workspaces.models import Workspace


@pytest.fixture
def base_url(settings: Any) -> Any:
    settings.DASHBOARD_BASE_URL = ORIGIN
    return settings


@pytest.fixture
def people(db: None, base_url: Any) -> dict[str, Any]:
    return {
        "olivia": make_person("olivia@acme.test"),
        "adam": make_person("adam@acme.test", role=Role.ADMIN),
        "vic": make_person("vic@acme.test", role=Role.VIEWER),
        "otto": make_person("otto@globex.test", workspace_slug="globex"),
    }


def acting(user: Any, slug: str = "acme") -> dict[str, Any]:
    """The keyword arguments a team service takes for `user` acting in workspace `slug`."""
    return {
        "actor": Actor(workspace=Workspace.objects.get(slug=slug), agent=None, user_email=user.email),
        "by": user,
    }


def membership(user: Any, slug: str = "acme") -> Membership:
    return Membership.objects.get(user=user, workspace__slug=slug)


def link_in(mail: Any) -> str:
    match = re.search(r"https?://\S+/auth/magic/(\S+)", mail.body)
    assert match, mail.body
    return match.group(1)


def events(event_type: str) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(event_type=event_type).order_by("timestamp", "id"))


# --- Invitations ------------------------------------------------------------------------------------------


def test_an_invitation_emails_a_link_that_creates_the_account_and_joins_with_the_role(
    people, client, mailoutbox
):
    sent = invitation_create(**acting(people["olivia"]), email=" Nina@Acme.test ", role=Role.APPROVER)

    assert sent.emailed and sent.invitation.email == "nina@acme.test"
    (mail,) = mailoutbox
    assert mail.to == ["nina@acme.test"]
    assert "olivia@acme.test invited you to join the workspace Acme" in mail.body
    assert "as an approver" in mail.body and "expires in 7 days" in mail.body
    (created,) = events("team.invitation.created")
    assert created.actor_user == "olivia@acme.test"
    assert created.details == {
        "invitation_id": sent.invitation.pk,
        "email": "nina@acme.test",
        "role": "approver",
    }

    token = link_in(mail)
    # Opening the link names the invitation and uses nothing (mail scanners fetch links).
    page = client.get(f"/auth/magic/{token}").content.decode()
    assert "Join Acme" in page and "olivia@acme.test" in page and "approver" in page
    assert MagicLink.objects.get(invitation=sent.invitation).used_at is None

    response = client.post(f"/auth/magic/{token}")
    assert response.status_code == 302 and response.url == "/auth/passkeys"  # next: a passkey
    joined = Membership.objects.select_related("user").get(user__email="nina@acme.test")
    assert (joined.workspace.slug, joined.role) == ("acme", "approver")
    assert not joined.user.has_usable_password()
    sent.invitation.refresh_from_db()
    assert sent.invitation.accepted_at is not None
    (accepted,) = events("team.invitation.accepted")
    assert accepted.actor_user == "nina@acme.test"
    assert accepted.details["role"] == "approver" and accepted.details["already_member"] is False
    assert client.get("/").url == "/w/acme/approvals"

    # Single use: the link is spent.
    client.post("/auth/sign-out")
    assert client.post(f"/auth/magic/{token}").status_code == 400


def test_someone_with_an_account_and_a_passkey_lands_in_the_workspace_they_joined(people, client, mailoutbox):
    from accounts.models import Passkey

    Passkey.objects.create(user=people["otto"], name="Laptop", credential_id=b"otto", public_key=b"k")
    invitation_create(**acting(people["olivia"]), email="otto@globex.test", role=Role.VIEWER)

    response = client.post(f"/auth/magic/{link_in(mailoutbox[0])}")

    assert response.status_code == 302 and response.url == "/w/acme/approvals"
    assert membership(people["otto"], "acme").role == "viewer"
    assert membership(people["otto"], "globex").role == "owner"  # untouched


def test_someone_signed_in_as_another_person_is_told_accepting_switches_who_they_are(
    people, client, mailoutbox
):
    invitation_create(**acting(people["olivia"]), email="nina@acme.test", role=Role.VIEWER)
    token = link_in(mailoutbox[0])
    client.force_login(people["adam"])

    page = client.get(f"/auth/magic/{token}").content.decode()

    assert 'data-testid="switches-person"' in page
    assert "You are signed in as <strong>adam@acme.test</strong>" in page
    assert "Accept and sign in as nina@acme.test" in page
    client.post("/auth/sign-out")
    assert 'data-testid="switches-person"' not in client.get(f"/auth/magic/{token}").content.decode()


def test_inviting_a_member_or_an_invited_address_again_or_with_a_bad_role_is_refused(people, mailoutbox):
    olivia = people["olivia"]
    with pytest.raises(AlreadyMember):
        invitation_create(**acting(olivia), email="VIC@acme.test", role=Role.ADMIN)
    invitation_create(**acting(olivia), email="nina@acme.test", role=Role.VIEWER)
    with pytest.raises(InvitationPending):
        invitation_create(**acting(olivia), email="nina@acme.test", role=Role.ADMIN)
    with pytest.raises(InvalidRequest):
        invitation_create(**acting(olivia), email="sam@acme.test", role="member")
    with pytest.raises(InvalidRequest):
        invitation_create(**acting(olivia), email="not an address", role=Role.VIEWER)
    assert Invitation.objects.count() == 1 and len(mailoutbox) == 1


def test_only_owners_invite(people, mailoutbox):
    for user in (people["adam"], people["vic"], people["otto"]):
        with pytest.raises(TeamChangeNotAllowed):
            invitation_create(**acting(user, "acme"), email="nina@acme.test", role=Role.VIEWER)
    assert not Invitation.objects.exists() and not mailoutbox


def test_a_resend_retires_the_old_link_and_a_revoke_every_link(people, client, mailoutbox):
    olivia = people["olivia"]
    invitation = invitation_create(**acting(olivia), email="nina@acme.test", role=Role.VIEWER).invitation
    first = link_in(mailoutbox[0])
    invitation_resend(**acting(olivia), invitation_id=invitation.pk)
    second = link_in(mailoutbox[1])
    assert first != second
    assert client.post(f"/auth/magic/{first}").status_code == 400

    invitation_revoke(**acting(olivia), invitation_id=invitation.pk)

    refused = client.post(f"/auth/magic/{second}")
    assert refused.status_code == 400
    assert not Membership.objects.filter(user__email="nina@acme.test").exists()
    with pytest.raises(InvitationNotPending):
        invitation_resend(**acting(olivia), invitation_id=invitation.pk)
    with pytest.raises(InvitationNotPending):
        invitation_revoke(**acting(olivia), invitation_id=invitation.pk)
    assert [r.details["email"] for r in events("team.invitation.resent")] == ["nina@acme.test"]
    assert [r.details["email"] for r in events("team.invitation.revoked")] == ["nina@acme.test"]
    # Revoked, the address can be invited afresh.
    invitation_create(**acting(olivia), email="nina@acme.test", role=Role.ADMIN)


def test_a_link_revoked_after_the_confirm_page_opened_does_not_join(people, client, mailoutbox):
    invitation = invitation_create(
        **acting(people["olivia"]), email="nina@acme.test", role=Role.VIEWER
    ).invitation
    token = link_in(mailoutbox[0])
    assert "Join Acme" in client.get(f"/auth/magic/{token}").content.decode()
    Invitation.objects.filter(pk=invitation.pk).update(revoked_at=invitation.sent_at)  # revoked meanwhile

    page = client.post(f"/auth/magic/{token}")

    assert page.status_code == 400 and "withdrawn" in page.content.decode()
    assert client.get("/").status_code == 302 and client.get("/").url.startswith("/auth/sign-in")


def test_someone_who_became_a_member_meanwhile_keeps_their_role(people, client, mailoutbox):
    invitation_create(**acting(people["olivia"]), email="nina@acme.test", role=Role.ADMIN)
    nina = make_person("nina@acme.test", role=Role.VIEWER)

    client.post(f"/auth/magic/{link_in(mailoutbox[0])}")

    assert membership(nina).role == "viewer"
    (accepted,) = events("team.invitation.accepted")
    assert accepted.details["already_member"] is True and accepted.details["invited_role"] == "admin"


def test_resends_are_throttled_per_address(people, mailoutbox):
    olivia = people["olivia"]
    invitation = invitation_create(**acting(olivia), email="nina@acme.test", role=Role.VIEWER).invitation
    for _ in range(4):
        invitation_resend(**acting(olivia), invitation_id=invitation.pk)
    with pytest.raises(InvitationThrottled):
        invitation_resend(**acting(olivia), invitation_id=invitation.pk)
    assert len(mailoutbox) == 5


# --- Roles and removals -----------------------------------------------------------------------------------


def test_an_owner_changes_a_role_and_it_is_audited(people):
    member = member_role_change(
        **acting(people["olivia"]), membership_id=membership(people["vic"]).pk, role="admin"
    )

    assert member.role == "admin" and membership(people["vic"]).role == "admin"
    (changed,) = events("team.member.role_changed")
    assert changed.actor_user == "olivia@acme.test"
    assert changed.details["email"] == "vic@acme.test"
    assert (changed.details["previous_role"], changed.details["role"]) == ("viewer", "admin")


def test_admins_and_viewers_change_no_roles_and_remove_no_one(people):
    target = membership(people["vic"]).pk
    with pytest.raises(TeamChangeNotAllowed):
        member_role_change(**acting(people["adam"]), membership_id=target, role="admin")
    with pytest.raises(TeamChangeNotAllowed):
        member_remove(**acting(people["vic"]), membership_id=membership(people["adam"]).pk)
    assert membership(people["vic"]).role == "viewer" and membership(people["adam"]).role == "admin"
    assert [r.outcome for r in events("team.member.role_change.rejected")] == ["rejected"]
    assert events("team.member.remove.rejected")[0].failure_reason == "team_change_not_allowed"


def test_the_last_owner_can_be_neither_demoted_nor_removed_nor_leave(people):
    olivia = people["olivia"]
    own = membership(olivia).pk
    with pytest.raises(LastOwner, match="make someone else an owner first"):
        member_role_change(**acting(olivia), membership_id=own, role="admin")
    with pytest.raises(LastOwner, match="You are the only owner"):
        member_remove(**acting(olivia), membership_id=own)
    assert membership(olivia).role == "owner"
    rejected = events("team.member.role_change.rejected") + events("team.member.remove.rejected")
    assert [r.failure_reason for r in rejected] == ["last_owner", "last_owner"]

    # With a second owner, the first may step down, and then leave.
    member_role_change(**acting(olivia), membership_id=membership(people["adam"]).pk, role="owner")
    member_role_change(**acting(olivia), membership_id=own, role="viewer")
    member_remove(**acting(olivia), membership_id=own)
    assert list(
        Membership.objects.filter(workspace__slug="acme", role="owner").values_list("user__email", flat=True)
    ) == ["adam@acme.test"]
    (left,) = events("team.member.removed")
    assert left.details["left"] is True and left.details["email"] == "olivia@acme.test"


def test_anyone_may_leave_and_an_owner_may_remove_anyone(people):
    member_remove(**acting(people["vic"]), membership_id=membership(people["vic"]).pk)
    member_remove(**acting(people["olivia"]), membership_id=membership(people["adam"]).pk)
    assert list(Membership.objects.filter(workspace__slug="acme").values_list("user__email", flat=True)) == [
        "olivia@acme.test"
    ]
    assert [r.details["left"] for r in events("team.member.removed")] == [True, False]


def test_a_demoted_owner_can_no_longer_act(people):
    olivia, adam = people["olivia"], people["adam"]
    member_role_change(**acting(olivia), membership_id=membership(adam).pk, role="owner")
    member_role_change(**acting(adam), membership_id=membership(olivia).pk, role="admin")
    with pytest.raises(TeamChangeNotAllowed):
        member_role_change(**acting(olivia), membership_id=membership(adam).pk, role="viewer")
    assert membership(adam).role == "owner"


def demote_each_other_at_once(slug: str) -> dict[str, str]:
    """Two owners of a fresh workspace, each demoting the other from their own thread and connection."""
    ann = make_person(f"ann@{slug}.test", workspace_slug=slug)
    bob = make_person(f"bob@{slug}.test", workspace_slug=slug)
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def demote(by: Any, target: Any) -> None:
        try:
            start.wait()
            member_role_change(**acting(by, slug), membership_id=membership(target, slug).pk, role="admin")
            outcomes[by.email] = "demoted"
        except (TeamChangeNotAllowed, LastOwner) as exc:
            outcomes[by.email] = exc.code
        finally:
            connection.close()

    racers = [threading.Thread(target=demote, args=pair) for pair in ((ann, bob), (bob, ann))]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    return outcomes


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_two_owners_demoting_each_other_at_once_leave_one_owner(base_url):
    """Each demotion checks that another owner remains, and each sees two owners when it starts: only the
    workspace lock, and reading the actor's own role under it, keep both from going through."""
    for round_number in range(5):
        slug = f"race{round_number}"
        outcomes = demote_each_other_at_once(slug)
        owners = Membership.objects.filter(workspace__slug=slug, role="owner").count()
        assert owners == 1, (round_number, outcomes)
        assert sorted(outcomes.values()) == ["demoted", "team_change_not_allowed"], outcomes
