"""The request CPU probe (`python -m bench.request_cpu`): every phase it names still exists, each mode
makes the requests it says, and the phases are put back afterwards."""

from __future__ import annotations

import pytest
from rest_framework.response import Response

from bench.request_cpu import PHASES, PhaseClock, measure, report
from bookings.api.holds import HoldCreateView

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_booking_is_a_hold_and_a_commit_each_phase_timed() -> None:
    clock, statuses, made = measure("book", 20, warmup=2)
    assert statuses == {201: 20} and made == 20
    assert clock.calls["HoldCreateView.post"] == clock.calls["CommitCreateView.post"] == 10
    whole = clock.nanoseconds["WSGIHandler.__call__"]
    assert 0 < clock.nanoseconds["HoldCreateView.post"] < whole
    assert "WSGIHandler.__call__" in report(clock, made).splitlines()[1]  # the largest first


def test_a_refused_hold_is_a_herds_loser_and_me_makes_no_statement() -> None:
    _, statuses, _ = measure("refused", 6, warmup=1)
    assert statuses == {409: 6}
    clock, statuses, _ = measure("me", 6, warmup=1)
    assert statuses == {200: 6} and clock.calls["_BinaryCursor.execute"] == 0


def test_the_phases_are_put_back() -> None:
    post, rendered = HoldCreateView.post, vars(Response)["rendered_content"]
    with PhaseClock().installed():
        assert HoldCreateView.post is not post
    assert HoldCreateView.post is post and vars(Response)["rendered_content"] is rendered
    assert len(PHASES) == len(set(PHASES))
