"""The getting-started guide's steps (an agent, its key, a first booking), read from the workspace's own
rows."""

from __future__ import annotations

from dataclasses import dataclass

from agentcal.clock import server_now
from bookings.models import Calendar, Reservation
from bookings.selectors import first_calendar, newest_reservation
from workspaces.models import Agent, Workspace
from workspaces.selectors import active_agents, has_agents, has_live_key


@dataclass
class Setup:
    """The guide's steps, read from the workspace's own rows."""

    agents: list[Agent]  # active ones, newest first: the key step offers them
    has_agent: bool
    has_key: bool
    calendar: Calendar | None  # the workspace's first calendar, which the script books on if there is one
    reservation: Reservation | None  # the newest hold or booking

    @classmethod
    def of(cls, workspace: Workspace) -> Setup:
        agents = active_agents(workspace)
        now = server_now()
        return cls(
            agents=agents,
            has_agent=bool(agents) or has_agents(workspace),
            has_key=has_live_key(workspace, now=now),
            calendar=first_calendar(workspace),
            reservation=newest_reservation(workspace),
        )

    @property
    def has_reservation(self) -> bool:
        return self.reservation is not None

    @property
    def done(self) -> int:
        return sum((self.has_agent, self.has_key, self.has_reservation))

    @property
    def complete(self) -> bool:
        return self.done == 3
