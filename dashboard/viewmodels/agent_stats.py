"""What the agents pages say of each agent: its holds, bookings, conversion and conflicts; its keys' and
webhook endpoints' states."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from audit.events import AuditEvent
from audit.selectors import rejections_by_agent
from bookings.selectors import agent_reservation_counts
from dashboard.viewmodels.conversion import conversion_percent
from webhooks.models import WebhookEndpoint
from workspaces.models import Agent, ApiKey, Workspace

CONFLICT_EVENTS = (AuditEvent.HOLD_REJECTED, AuditEvent.COMMIT_REJECTED)


@dataclass
class AgentStats:
    holds: int = 0
    commits: int = 0
    commits_from_holds: int = 0
    conflicts: int = 0

    @property
    def conversion(self) -> int | None:
        return conversion_percent(holds=self.holds, commits_from_holds=self.commits_from_holds)


def agent_stats(workspace: Workspace, agents: Sequence[Agent]) -> dict[int, AgentStats]:
    stats = {agent.pk: AgentStats() for agent in agents}
    for row in agent_reservation_counts(stats.keys()):
        entry = stats[row["agent_id"]]
        entry.holds, entry.commits = row["holds"], row["commits"]
        entry.commits_from_holds = row["commits_from_holds"]
    # Conflicts are rejected holds and commits, as far back as the audit trail is kept.
    by_public_id = {agent.public_id: agent.pk for agent in agents}
    conflicts = rejections_by_agent(
        workspace=workspace, event_types=CONFLICT_EVENTS, agent_public_ids=by_public_id.keys()
    )
    for public_id, count in conflicts.items():
        stats[by_public_id[public_id]].conflicts = count
    return stats


# A key of a disabled agent is refused like a revoked one, but comes back when the agent is enabled again:
# it shows neither as usable nor as revoked.
AGENT_DISABLED = "agent disabled"


def key_status(key: ApiKey, now: datetime, *, agent_is_active: bool) -> str:
    """What a key's row says: revoked, expired, agent disabled, expiring (works until its end) or active."""
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    if not agent_is_active:
        return AGENT_DISABLED
    return "expiring" if key.expires_at is not None else "active"


def endpoint_status(endpoint: WebhookEndpoint) -> str:
    if endpoint.disabled_at is not None:
        return "disabled"
    return "failing" if endpoint.failing_since is not None else "active"
