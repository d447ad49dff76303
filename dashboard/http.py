"""The request a workspace page sees, typed (as healthchecks' `AuthenticatedHttpRequest`)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails

from accounts.models import Membership
from workspaces.actor import Actor
from workspaces.models import Workspace


class DashboardRequest(HttpRequest):
    """A request that has passed `workspace_page`: a signed-in member of the workspace.

    Only a type for annotations: Django still passes its own request object, and these attributes are
    set on it by django-htmx's middleware (`htmx`) and by `workspace_page` (the rest).
    """

    user: User  # login_required has run, and AUTH_USER_MODEL is Django's User
    htmx: HtmxDetails
    membership: Membership
    workspace: Workspace
    actor: Actor  # who acts, for audited changes
