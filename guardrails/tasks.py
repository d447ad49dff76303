from __future__ import annotations

from celery import shared_task

from guardrails.services import limit_reached


@shared_task(name="guardrails.limit_reached", ignore_result=True)  # workspaces.limits.LIMIT_NOTICE_TASK
def limit_reached_task(agent_pk: int, limit: str) -> None:
    limit_reached(agent_pk=agent_pk, limit=limit)
