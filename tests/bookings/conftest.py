"""Fixtures for the engine tests that call it in-process (no HTTP)."""

from __future__ import annotations

import pytest

from workspaces.actor import Actor
from workspaces.models import Agent, Workspace


@pytest.fixture
def actor(transactional_db: None) -> Actor:
    """The SDR agent of workspace acme, acting in-process."""
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    agent = Agent.objects.create(workspace=workspace, name="sdr", slug="sdr", priority=100, max_priority=500)
    return Actor(workspace=workspace, agent=agent)
