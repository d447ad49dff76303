"""Helpers for the accounts tests: people with a membership, the test origin."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from accounts.models import Membership, Role
from workspaces.models import Workspace

ORIGIN = "http://testserver"


def make_person(email: str, workspace_slug: str = "acme", role: str = Role.OWNER) -> Any:
    workspace, _ = Workspace.objects.get_or_create(
        slug=workspace_slug, defaults={"name": workspace_slug.title()}
    )
    user = get_user_model().objects.create_user(username=email, email=email)
    Membership.objects.create(user=user, workspace=workspace, role=role)
    return user
