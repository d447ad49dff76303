"""Shared by the audit, calendar and agents page tests: named people and agents, and small shortcuts.

The team: in workspace `acme` an owner (olivia), an admin (adam) and an approver (mo, `member`) with
agents `sdr` and `exec_assistant`; in workspace `globex` an outsider (otto) with agent `rival`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.test import Client

from accounts.models import Membership, Role
from agentcal.ids import new_public_id
from bookings.models import Calendar
from bookings.spans import Span
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace


@dataclass
class Team:
    workspace: Workspace
    other_workspace: Workspace
    owner: Any
    admin: Any
    member: Any  # an approver: decides approvals, manages nothing
    outsider: Any
    sdr: Agent
    exec_assistant: Agent
    rival: Agent
    viewer: Any = None  # added by the tests that need one


def make_team(user_model: Any) -> Team:
    acme = Workspace.objects.create(slug="acme", name="Acme")
    globex = Workspace.objects.create(slug="globex", name="Globex")

    def person(email: str, workspace: Workspace, role: str) -> Any:
        user = user_model.objects.create_user(username=email, email=email)
        Membership.objects.create(user=user, workspace=workspace, role=role)
        return user

    return Team(
        workspace=acme,
        other_workspace=globex,
        owner=person("olivia@acme.test", acme, Role.OWNER),
        admin=person("adam@acme.test", acme, Role.ADMIN),
        member=person("mo@acme.test", acme, Role.APPROVER),
        outsider=person("otto@globex.test", globex, Role.OWNER),
        sdr=Agent.objects.create(workspace=acme, name="SDR bot", slug="sdr", priority=100, max_priority=200),
        exec_assistant=Agent.objects.create(
            workspace=acme, name="Exec assistant", slug="exec-assistant", priority=500, max_priority=900
        ),
        rival=Agent.objects.create(
            workspace=globex, name="Rival", slug="rival", priority=100, max_priority=100
        ),
    )


def signed_in(user: Any, *, enforce_csrf_checks: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf_checks)
    client.force_login(user)
    return client


def actor(agent: Agent) -> Actor:
    return Actor(workspace=agent.workspace, agent=agent)


def make_calendar(workspace: Workspace, name: str = "Sales team", **fields: Any) -> Calendar:
    return Calendar.objects.create(workspace=workspace, name=name, **fields)


def future_day(days_ahead: int = 2) -> date:
    return (datetime.now(UTC) + timedelta(days=days_ahead)).date()


def span_on(day: date, start: time, minutes: int = 30) -> Span:
    """A span on `day` at `start`, both read as UTC."""
    begin = datetime.combine(day, start, tzinfo=UTC)
    return Span(begin, begin + timedelta(minutes=minutes))


def text(response: Any) -> str:
    return response.content.decode()


def insert_audit_row(
    *,
    workspace_id: int,
    at: datetime,
    event_type: str = "calendar.hold.created",
    outcome: str = "success",
    agent_public_id: str = "",
    calendar_public_id: str = "",
    failure_reason: str = "",
) -> str:
    """An audit row with a chosen timestamp, in SQL (the model stamps every row with the database's now)."""
    public_id = new_public_id("aud")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO audit_auditrecord
                (public_id, timestamp, event_type, outcome, workspace_id, agent_public_id,
                 actor_user, auth_key_prefix, calendar_public_id, reservation_public_id,
                 failure_reason, request_id, details)
            VALUES (%s, %s, %s, %s, %s, %s, '', '', %s, '', %s, '', '{}')
            """,
            [
                public_id,
                at,
                event_type,
                outcome,
                workspace_id,
                agent_public_id,
                calendar_public_id,
                failure_reason,
            ],
        )
    return public_id


def tables_containing(needle: str) -> list[str]:
    """Every table with a row whose text contains `needle` (as tests/workspaces/test_api_keys.py scans)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
        tables = [name for (name,) in cursor.fetchall()]
        found = []
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s', [f"%{needle}%"])
            if cursor.fetchone()[0]:
                found.append(table)
        return found
