"""The workspace shell (sidebar navigation, role, pending count) on signed-in pages that belong to no
workspace URL, such as the account's passkeys: without it they would be a dead end with no way back."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from accounts.roles import Permission
from accounts.selectors import first_membership
from approvals.selectors import pending_count


def workspace_shell(request: HttpRequest) -> dict[str, Any]:
    # Workspace pages set request.membership (dashboard.access) and pass their own page_context.
    if hasattr(request, "membership") or not request.user.is_authenticated:
        return {}
    # The workspace `/` opens, so the sidebar leads where the brand link does.
    membership = first_membership(user_id=request.user.pk)
    if membership is None:
        return {}
    return {
        "workspace": membership.workspace,
        "membership": membership,
        "can": {permission.value: membership.may(permission) for permission in Permission},
        "pending_count": pending_count(membership.workspace),
    }
