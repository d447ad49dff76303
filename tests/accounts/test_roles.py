"""The permission table (accounts.roles): each role a superset of the next, the database refusing roles
the table does not know, the migration from the old `member` role, and services asking the table."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from accounts.models import Membership
from accounts.roles import GRANTS, Permission, Role, role_may, roles_that_may
from agentcal.errors import RoleNotAllowed
from approvals.models import Approval
from approvals.services import approval_decide, approval_request
from audit.models import AuditRecord
from tests.accounts.helpers import make_person
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace


def test_each_role_may_what_the_next_may_and_more():
    ladder = [GRANTS[role] for role in (Role.VIEWER, Role.APPROVER, Role.ADMIN, Role.OWNER)]
    assert all(lower < higher for lower, higher in zip(ladder, ladder[1:], strict=False))
    assert roles_that_may(Permission.MANAGE_TEAM) == ["owner"]
    assert roles_that_may(Permission.PAUSE_AGENTS) == ["owner"]
    assert roles_that_may(Permission.MANAGE_WORKSPACE) == ["owner", "admin"]
    assert roles_that_may(Permission.READ_INBOXES) == ["owner", "admin"]
    assert roles_that_may(Permission.DECIDE_APPROVALS) == ["owner", "admin", "approver"]
    assert roles_that_may(Permission.READ) == ["owner", "admin", "approver", "viewer"]
    assert not role_may("member", Permission.READ)  # an unknown role grants nothing


def test_the_database_refuses_a_role_the_table_does_not_know(db):
    user = make_person("olivia@acme.test")
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.filter(user=user).update(role="member")


def test_a_viewer_cannot_decide_an_approval_even_past_the_dashboard(db):
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    agent = Agent.objects.create(workspace=workspace, name="SDR", slug="sdr", priority=100, max_priority=100)
    approval = approval_request(actor=Actor(workspace=workspace, agent=agent), summary="Send it", evidence={})
    viewer = make_person("vic@acme.test", role=Role.VIEWER)

    with pytest.raises(RoleNotAllowed):
        approval_decide(approval_id=approval.public_id, workspace=workspace, user=viewer, approve=True)

    assert Approval.objects.get(pk=approval.pk).status == "pending"
    refused = AuditRecord.objects.get(event_type="approval.decide.rejected")
    assert (refused.actor_user, refused.failure_reason) == ("vic@acme.test", "role_not_allowed")


@pytest.mark.django_db(transaction=True)
def test_members_become_approvers_when_the_roles_arrive():
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    user = get_user_model().objects.create_user(username="mo@acme.test", email="mo@acme.test")
    executor = MigrationExecutor(connection)
    executor.migrate([("accounts", "0001_initial")])
    try:
        with connection.cursor() as cursor:  # a membership as the old schema allowed it
            cursor.execute(
                "INSERT INTO accounts_membership (user_id, workspace_id, role, created_at)"
                " VALUES (%s, %s, 'member', now())",
                [user.pk, workspace.pk],
            )
    finally:
        # Forward to the newest migration, not just the one under test: later tests on this database need
        # every table the later migrations make.
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes("accounts"))
    assert Membership.objects.get(user=user).role == "approver"
