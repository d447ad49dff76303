from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from accounts.models import Membership, Role
from tests.accounts.authenticator import SoftAuthenticator
from workspaces.models import Workspace

ORIGIN = "http://testserver"


@pytest.fixture
def webauthn_settings(settings: Any) -> Any:
    # Django's test client talks to "testserver"; in a browser the RP id is the real host name.
    settings.DASHBOARD_BASE_URL = ORIGIN
    settings.WEBAUTHN_RP_ID = "testserver"
    return settings


@pytest.fixture
def authenticator(webauthn_settings: Any) -> SoftAuthenticator:
    return SoftAuthenticator(rp_id="testserver", origin=ORIGIN)


def make_person(email: str, workspace_slug: str = "acme", role: str = Role.OWNER) -> Any:
    workspace, _ = Workspace.objects.get_or_create(
        slug=workspace_slug, defaults={"name": workspace_slug.title()}
    )
    user = get_user_model().objects.create_user(username=email, email=email)
    Membership.objects.create(user=user, workspace=workspace, role=role)
    return user


@pytest.fixture
def owner(db: None) -> Any:
    return make_person("olivia@acme.test")
