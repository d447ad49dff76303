"""Celery tasks: thin wrappers that take ids and call webhooks.outbox."""

from __future__ import annotations

from celery import shared_task

from webhooks.outbox import (
    deliveries_due,
    delivery_attempt,
    delivery_replay,
    outbox_dispatch,
    outbox_purge_old,
)


@shared_task(name="webhooks.dispatch_outbox", ignore_result=True)
def dispatch_outbox() -> int:
    sent = 0
    while delivery_ids := outbox_dispatch():
        for delivery_id in delivery_ids:
            deliver_webhook.delay(delivery_id)
        sent += len(delivery_ids)
    return sent


@shared_task(name="webhooks.deliver", ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    delay = delivery_attempt(delivery_id)
    if delay is not None:
        # The database row is the source of truth (catch-up re-finds it if this message is lost).
        deliver_webhook.apply_async((delivery_id,), countdown=delay)


@shared_task(name="webhooks.replay", ignore_result=True)
def replay_webhook(delivery_id: int) -> None:
    delivery_replay(delivery_id)


@shared_task(name="webhooks.catch_up", ignore_result=True)
def catch_up() -> int:
    """Periodic: dispatch events whose nudge was lost (broker down) and send deliveries that are due."""
    dispatched = dispatch_outbox()
    due = deliveries_due()
    for delivery_id in due:
        deliver_webhook.delay(delivery_id)
    return dispatched + len(due)


@shared_task(name="webhooks.purge_old_events", ignore_result=True)
def purge_old_events() -> int:
    return outbox_purge_old()
