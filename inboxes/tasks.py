"""Celery tasks: thin wrappers that take ids and call inboxes.services."""

from __future__ import annotations

from celery import shared_task

from inboxes.services import inbound_parse, inbound_parse_pending


@shared_task(name="inboxes.parse_inbound", ignore_result=True)
def parse_inbound(raw_id: int) -> int:
    return len(inbound_parse(raw_id))


@shared_task(name="inboxes.parse_pending", ignore_result=True)
def parse_pending() -> int:
    """Periodic: parse raw messages that were accepted but never parsed."""
    return inbound_parse_pending()
