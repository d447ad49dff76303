"""One "fetch it, or 404 if it is not this workspace's" per object the pages take from their URL: another
workspace's object answers exactly as one that does not exist."""

from __future__ import annotations

from django.http import Http404

from approvals.models import Approval
from approvals.selectors import approval_in_workspace
from bookings.models import Calendar, Reservation
from bookings.selectors import calendar_in_workspace, reservation_on_calendar
from sync.models import Connection
from sync.selectors import connection_in_workspace
from workspaces.models import Agent, Workspace
from workspaces.selectors import agent_in_workspace


def calendar_in(workspace: Workspace, calendar_id: str) -> Calendar:
    calendar = calendar_in_workspace(workspace_id=workspace.pk, public_id=calendar_id)
    if calendar is None:
        raise Http404("No such calendar")
    return calendar


def reservation_in(calendar: Calendar, reservation_id: str) -> Reservation:
    """The calendar's share of a hold or booking, by either id (a hold's id finds the booking it became)."""
    reservation = reservation_on_calendar(calendar, reservation_id)
    if reservation is None:
        raise Http404("No such hold or booking on this calendar")
    return reservation


def connection_in(workspace: Workspace, connection_id: str) -> Connection:
    connection = connection_in_workspace(workspace, connection_id)
    if connection is None:
        raise Http404("No such connection")
    return connection


def approval_in(workspace: Workspace, approval_id: str) -> Approval:
    approval = approval_in_workspace(workspace, approval_id)
    if approval is None:
        raise Http404("No such approval")
    return approval


def agent_in(workspace: Workspace, agent_id: str) -> Agent:
    agent = agent_in_workspace(workspace, agent_id)
    if agent is None:
        raise Http404("No such agent")
    return agent
