"""Reads of agents that people's pages share."""

from __future__ import annotations

from collections.abc import Iterable

from workspaces.models import Agent, Workspace


def agent_names(workspace: Workspace, public_ids: Iterable[str]) -> dict[str, str]:
    """The names of the workspace's agents among `public_ids`, by public id (ids of none are left out)."""
    return dict(
        Agent.objects.filter(workspace=workspace, public_id__in=set(public_ids)).values_list(
            "public_id", "name"
        )
    )
