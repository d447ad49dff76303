"""The request a workspace page sees, typed (as healthchecks' `AuthenticatedHttpRequest`), and the
stricter Content-Security-Policy of pages that show strangers' or agents' HTML."""

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


# Pages showing strangers' HTML (an inbox thread, an approval's email draft) carry their own policy,
# whatever the installation's CONTENT_SECURITY_POLICY says: no script but the dashboard's own files (no
# inline script, no on...= handlers, no javascript: URLs), no image from another origin (tracking pixels),
# no frames or plugins.
THREAD_PAGE_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "frame-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
