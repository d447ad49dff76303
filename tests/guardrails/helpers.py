"""Setting an agent's guardrails the way the dashboard does (a save, which every process's copy of the
key rows follows), before or between a test's requests."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from agentcal.local_cache import generation
from tests.helpers import Persona
from workspaces.models import Agent, Workspace


def set_limits(persona: Persona, **limits: Any) -> None:
    agent = Agent.objects.get(pk=persona.agent.pk)
    for name, value in limits.items():
        setattr(agent, f"limit_{name}", value)
    agent.save(update_fields=[f"limit_{name}" for name in limits])
    assert generation.poll_once()  # this process (the live server's) trusts no older copy from now on


def set_workspace_limits(workspace: Workspace, **limits: Any) -> None:
    for name, value in limits.items():
        setattr(workspace, f"limit_{name}", value)
    workspace.save(update_fields=[f"limit_{name}" for name in limits])
    assert generation.poll_once()


def refusals_counted(persona: Persona, limit: str) -> float:
    value = REGISTRY.get_sample_value(
        "agentcal_limit_refusals_total", {"agent": persona.agent.public_id, "limit": limit}
    )
    return value or 0.0
