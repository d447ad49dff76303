"""People: an account per email address (never a password), and the first owner of a workspace."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from accounts.models import Membership, Role
from workspaces.models import Workspace

User = get_user_model()


def normalize_email(email: str) -> str:
    return email.strip().lower()


def person_get_or_create(*, email: str) -> Any:
    """The person with this address, created (without a password) when there is none."""
    email = normalize_email(email)
    user = User.objects.filter(email__iexact=email).first()
    if user is None:
        user = User.objects.create_user(username=email, email=email)
        user.set_unusable_password()  # people never have passwords here
        user.save(update_fields=["password"])
    return user


@transaction.atomic
def owner_create(*, email: str, workspace_slug: str, workspace_name: str | None = None) -> Membership:
    """Create (or find) a person and make them an owner of the workspace (created when missing)."""
    workspace, _ = Workspace.objects.get_or_create(
        slug=workspace_slug, defaults={"name": workspace_name or workspace_slug}
    )
    user = person_get_or_create(email=email)
    membership, created = Membership.objects.get_or_create(
        user=user, workspace=workspace, defaults={"role": Role.OWNER}
    )
    if not created and membership.role != Role.OWNER:
        membership.role = Role.OWNER
        membership.save(update_fields=["role"])
    return membership
