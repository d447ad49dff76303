"""Fixtures for any test: people who decide (Django users with a workspace membership)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from accounts.models import Membership
from tests.helpers import Persona
from workspaces.models import Workspace


@pytest.fixture
def make_person(transactional_db: None) -> Callable[..., User]:
    def make(email: str, *, workspace: Workspace, role: str = "approver") -> User:
        user = get_user_model().objects.create_user(username=email, email=email)
        Membership.objects.create(user=user, workspace=workspace, role=role)
        return user

    return make


@pytest.fixture
def owner(sdr: Persona, make_person: Callable[..., User]) -> User:
    """The acme workspace's owner: gets the notification emails, may decide."""
    return make_person("olivia@acme.test", workspace=sdr.agent.workspace, role="owner")
