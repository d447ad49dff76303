"""DRF authentication (Bearer API keys) and the per-endpoint scope check."""

from __future__ import annotations

import logging
from typing import Any

from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from agentcal.errors import InsufficientScope, InvalidKey, Unauthenticated
from workspaces.actor import Actor
from workspaces.keys import api_key_verify, bearer_key, lookup_prefix

logger = logging.getLogger(__name__)


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Actor, Any]:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        raw = bearer_key(header)
        if not raw:
            raise Unauthenticated("Send `Authorization: Bearer avs_live_…`.")
        try:
            key = api_key_verify(raw, peer=request.META.get("REMOTE_ADDR", ""))
        except InvalidKey as exc:
            # Only the non-secret prefix is ever logged.
            exc.key_prefix = lookup_prefix(raw) or ""  # for the audit row, not the response
            logger.info("rejected API key prefix=%r reason=%s", exc.key_prefix, exc.reason)
            raise
        actor = Actor(
            workspace=key.agent.workspace,
            agent=key.agent,
            key_prefix=key.prefix,
            scopes=frozenset(key.scopes),
            request_id=getattr(request._request, "request_id", ""),
        )
        return actor, key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="agentcal"'


# In `required_scopes`: any valid key may call it (what an agent may learn about itself).
ANY_SCOPE = "*"


class HasRequiredScope(BasePermission):
    """Views declare `required_scopes = {"GET": Scope.X, "POST": Scope.Y}`; a method not listed is refused."""

    def has_permission(self, request: Request, view: Any) -> bool:
        actor = request.user
        if not isinstance(actor, Actor):
            raise Unauthenticated()
        method = "GET" if request.method == "HEAD" else request.method
        required = getattr(view, "required_scopes", {}).get(method)
        if required is None:
            # A method the view does not implement: let DRF answer 405 rather than a misleading 403.
            return request.method == "OPTIONS" or not hasattr(view, method.lower())
        if required != ANY_SCOPE and required not in actor.scopes:
            raise InsufficientScope(
                f"This endpoint needs the `{required}` scope.", required_scope=str(required)
            )
        return True
