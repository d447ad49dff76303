"""`GET /v1/me`: who the calling key is — its agent, workspace, scopes and priorities — so a client (the
MCP server, an agent framework) can offer exactly the tools the key may use without probing for them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agentcal.api.fields import OutputSerializer
from agentcal.api.views import AgentAPIView
from workspaces.authentication import ANY_SCOPE
from workspaces.limits import agent_limits, pause_of
from workspaces.models import ApiKey


class MeAgentOutput(OutputSerializer):
    id = serializers.CharField()
    name = serializers.CharField()
    slug = serializers.CharField()
    priority = serializers.IntegerField(
        help_text="What the agent's requests carry unless they ask for another."
    )
    max_priority = serializers.IntegerField(help_text="The most the agent may ask for.")


class MeWorkspaceOutput(OutputSerializer):
    id = serializers.CharField()
    slug = serializers.CharField()
    name = serializers.CharField()


class MeKeyOutput(OutputSerializer):
    prefix = serializers.CharField(help_text="The key's public prefix (as in the audit trail).")
    scopes = serializers.ListField(child=serializers.CharField(), help_text="What this key may do.")
    expires_at = serializers.DateTimeField(allow_null=True, help_text="Null for a key that does not expire.")


class MeLimitsOutput(OutputSerializer):
    requests_per_second = serializers.FloatField(help_text="The request rate sustained (token bucket).")
    request_burst = serializers.IntegerField(help_text="Requests at once before the rate applies.")
    live_holds = serializers.IntegerField(help_text="Holds alive at once.")
    bookings_per_day = serializers.IntegerField(help_text="Bookings made per UTC day.")
    searches_per_minute = serializers.IntegerField(
        help_text="Availability searches and find-and-holds per minute."
    )


class MePausedOutput(OutputSerializer):
    scope = serializers.ChoiceField(
        choices=["agent", "workspace"], help_text="Whether the agent or its whole workspace is paused."
    )
    paused_at = serializers.DateTimeField()


class MeOutput(OutputSerializer):
    agent = MeAgentOutput()
    workspace = MeWorkspaceOutput()
    key = MeKeyOutput()
    limits = MeLimitsOutput(help_text="The limits that bind this agent (its own, else its workspace's).")
    paused = MePausedOutput(
        allow_null=True, help_text="Set while an owner has paused the agent: writes answer 423."
    )


class MeView(AgentAPIView):
    summaries = {"GET": "Who the calling key is: agent, scopes, limits, pause"}
    operation_ids = {"GET": "get_me"}
    required_scopes = {"GET": ANY_SCOPE}

    @extend_schema(responses={200: MeOutput})
    def get(self, request: Request) -> Response:
        actor = self.actor
        key = request.auth
        assert isinstance(key, ApiKey) and actor.agent is not None
        agent, workspace = actor.agent, actor.workspace
        pause = pause_of(agent, workspace)
        body = {
            "agent": {
                "id": agent.public_id,
                "name": agent.name,
                "slug": agent.slug,
                "priority": agent.priority,
                "max_priority": agent.max_priority,
            },
            "workspace": {"id": workspace.public_id, "slug": workspace.slug, "name": workspace.name},
            "key": {
                "prefix": key.prefix,
                "scopes": sorted(actor.scopes),
                "expires_at": key.expires_at,
            },
            "limits": agent_limits(agent, workspace).as_dict(),
            "paused": None if pause is None else {"scope": pause.scope, "paused_at": pause.paused_at},
        }
        return Response(MeOutput(body).data)
