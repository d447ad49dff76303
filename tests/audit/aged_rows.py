"""Insert audit rows dated in the past, straight in SQL (the model gives every row the database's now())."""

from __future__ import annotations

from django.db import connection

from agentcal.ids import new_public_id


def insert_aged_audit_row(
    *,
    workspace_id: int | None,
    age_days: int,
    event_type: str = "calendar.hold.created",
    agent_public_id: str = "",
    calendar_public_id: str = "",
) -> str:
    public_id = new_public_id("aud")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO audit_auditrecord
                (public_id, timestamp, event_type, outcome, workspace_id, agent_public_id, auth_key_prefix,
                 calendar_public_id, reservation_public_id, failure_reason, request_id, details)
            VALUES (%s, now() - make_interval(days => %s), %s, 'success', %s, %s, '', %s, '', '', '', '{}')
            """,
            [public_id, age_days, event_type, workspace_id, agent_public_id, calendar_public_id],
        )
    return public_id
