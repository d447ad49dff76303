from __future__ import annotations

from dataclasses import dataclass, field

from workspaces.models import Agent, Workspace


@dataclass(frozen=True)
class Actor:
    """Who is acting: the authenticated agent, the key it used and the request being served.

    Engine and audit functions take an Actor rather than a request, so they run the same from the API,
    from Celery tasks and from the dashboard.
    """

    workspace: Workspace
    agent: Agent | None
    key_prefix: str = ""
    scopes: frozenset[str] = field(default_factory=frozenset)
    request_id: str = ""
    # The signed-in human acting (dashboard), alone or on an agent's behalf (deciding its approval).
    user_email: str = ""

    # DRF treats request.user as a user object; an authenticated actor is always authenticated.
    is_authenticated = True

    @property
    def agent_public_id(self) -> str:
        return self.agent.public_id if self.agent else ""
