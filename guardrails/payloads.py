"""What the emergency stop's events carry (`agent.paused|resumed`, `workspace.paused|resumed`; built by
guardrails.services, published by agentcal.api.event_catalog)."""

from __future__ import annotations

from rest_framework import serializers

from agentcal.api.fields import OutputSerializer


class PauseEventOutput(OutputSerializer):
    agent_id = serializers.CharField(help_text="The agent this event is for.")
    scope = serializers.ChoiceField(
        choices=["agent", "workspace"], help_text="Whether the agent alone or its whole workspace."
    )
    by = serializers.CharField(help_text="Who paused or resumed (an owner's email, or the command line).")
    at = serializers.DateTimeField()
    release_holds = serializers.BooleanField(help_text="Whether the agent's live holds were released.")
