"""The round trips the README promises, pinned: a hold is four statements and COMMIT, a commit four and
COMMIT, a refused request three (autocommitted). Statements through `bound_cursor` are counted too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from agentcal.errors import SlotConflict
from bookings import engine
from tests.bookings.helpers import half_hour
from workspaces.actor import Actor

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every statement sent on this thread's connection inside the block (as Zulip counts queries)."""
    seen: list[str] = []

    def record(execute: Any, sql: Any, params: Any, many: bool, context: dict[str, Any]) -> Any:
        seen.append(" ".join(str(sql).split())[:80])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield seen


def test_a_hold_is_four_statements_and_commit(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    span = half_hour(30)
    with statements() as sent:
        engine.hold_create(actor=actor, calendar=calendar, span=span)
    # pre-check; calendar lock; lapsed-hold expiry + what is in the way; reservation + audit + outbox rows
    assert len(sent) == 4, sent


def test_committing_a_hold_is_four_statements_and_commit(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    group = engine.hold_create(actor=actor, calendar=calendar, span=half_hour(30))
    assert group.hold_token is not None
    with statements() as sent:
        engine.hold_commit(actor=actor, calendar=calendar, hold_token=group.hold_token)
    # group read; calendar lock; the CAS UPDATE … RETURNING; audit + outbox rows
    assert len(sent) == 4, sent


def test_a_refused_hold_is_three_statements(actor: Actor) -> None:
    calendar = engine.calendar_create(actor=actor, name="room")
    span = half_hour(30)
    engine.booking_create(actor=actor, calendar=calendar, span=span)
    with statements() as sent, pytest.raises(SlotConflict):
        engine.hold_create(actor=actor, calendar=calendar, span=span)
    # pre-check (finds the blocker); the alternatives; the refusal's audit row
    assert len(sent) == 3, sent
