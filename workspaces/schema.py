"""OpenAPI description of the Bearer API-key scheme (loaded by WorkspacesConfig.ready)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "workspaces.authentication.ApiKeyAuthentication"
    name = "agentApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "avs_live_<random>",
            "description": "An agent's API key; each endpoint also needs a scope (403 insufficient_scope).",
        }
