"""The client's retry rule and error mapping, case by case (the live-server tests show them end to end:
test_python_client.py's lost response, Retry-After and no-retry tests)."""

from __future__ import annotations

import random
import socket
from datetime import UTC, datetime

import pytest
from agentcal_client import (
    AgentCal,
    AgentCalError,
    AgentPaused,
    APIConnectionError,
    APITimeoutError,
    BookingTooLong,
    Conflict,
    IdempotencyInProgress,
    InvalidRange,
    InvalidRequest,
    PreconditionFailed,
    QuotaExceeded,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    SlotConflict,
)
from agentcal_client._transport import RetryBudget, api_base_url, parse_retry_after
from agentcal_client.problems import error_from_response
from agentcal_client.rate_limits import Pacer, parse_rate_limit


def response_error(status: int, code: str | None = None, retry_after: float | None = None) -> AgentCalError:
    body = {"status": status, "error": code, "detail": "x"} if code else None
    return error_from_response(status, body, text="<html>Bad gateway</html>", retry_after=retry_after)


@pytest.mark.parametrize(
    "error",
    [
        APIConnectionError("refused"),
        APITimeoutError("slow"),
        response_error(429, "rate_limited"),
        response_error(502),
        response_error(503, "service_unavailable"),
        response_error(504),
        response_error(409, "idempotency_in_progress"),
    ],
    ids=lambda e: e.code,
)
def test_what_waiting_can_fix_is_retried(error: AgentCalError) -> None:
    assert RetryBudget(max_retries=3, deadline_seconds=60).wait_before_retry(error) is not None


@pytest.mark.parametrize(
    "error",
    [
        response_error(400, "invalid_range"),
        response_error(403, "not_owner"),
        response_error(404, "not_found"),
        response_error(409, "slot_conflict"),
        response_error(409, "hold_evicted"),
        response_error(409, "stale_fencing_token"),
        response_error(412, "precondition_failed"),
        response_error(422, "booking_too_long"),
        response_error(422, "idempotency_key_reused"),
        response_error(429, "quota_exceeded", retry_after=5),
        response_error(423, "agent_paused"),
        response_error(500),
    ],
    ids=lambda e: e.code,
)
def test_what_waiting_cannot_fix_is_not_retried(error: AgentCalError) -> None:
    assert RetryBudget(max_retries=3, deadline_seconds=60).wait_before_retry(error) is None
    assert not error.retryable


def test_waits_are_decorrelated_jitter_capped_and_bounded_by_max_retries() -> None:
    random.seed(7)
    budget = RetryBudget(max_retries=8, deadline_seconds=3600)
    waits = [budget.wait_before_retry(response_error(503, "service_unavailable")) for _ in range(9)]

    *granted, refused = waits
    assert refused is None, "the ninth retry is over max_retries"
    previous = 0.5
    for wait in granted:
        assert wait is not None and 0.5 <= wait <= min(30.0, previous * 3)
        previous = wait
    assert len(set(granted)) == len(granted), "random, not a fixed schedule"


def test_retry_after_replaces_the_jitter_up_to_a_cap_and_the_deadline() -> None:
    assert RetryBudget(max_retries=3, deadline_seconds=60).wait_before_retry(
        response_error(503, "service_unavailable", retry_after=7)
    ) == pytest.approx(7)
    assert (
        RetryBudget(max_retries=3, deadline_seconds=600).wait_before_retry(
            response_error(429, "rate_limited", 120)
        )
        is None
    ), "over the cap: give up now rather than park the agent"
    assert (
        RetryBudget(max_retries=3, deadline_seconds=5).wait_before_retry(
            response_error(429, "rate_limited", 10)
        )
        is None
    ), "a wait past the call's deadline ends the retries"


def test_problems_map_to_classes_by_code_then_by_status() -> None:
    assert type(response_error(409, "slot_conflict")) is SlotConflict
    assert type(response_error(409, "something_new")) is Conflict
    assert type(response_error(400, "invalid_range")) is InvalidRange
    assert type(response_error(412, "precondition_failed")) is PreconditionFailed
    assert type(response_error(422, "booking_too_long")) is BookingTooLong
    assert type(response_error(429, "quota_exceeded")) is QuotaExceeded
    assert type(response_error(429, "rate_limited")) is RateLimited
    assert type(response_error(423, "agent_paused")) is AgentPaused
    assert type(response_error(423)) is AgentPaused, "423 is only ever a pause"
    assert type(response_error(400, "agent_paused")) is InvalidRequest
    assert type(response_error(503, "service_unavailable")) is ServiceUnavailable
    assert type(response_error(409, "booking_too_long")) is Conflict, "a code from another status is ignored"
    assert isinstance(response_error(409, "idempotency_in_progress"), IdempotencyInProgress)
    gateway = response_error(502)
    assert type(gateway) is ServerError and gateway.code == "http_502" and "Bad gateway" in gateway.detail


def test_no_server_listening_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        AgentCal("avs_live_x", base_url=f"http://127.0.0.1:{port}", max_retries=0) as client,
        pytest.raises(APIConnectionError) as caught,
    ):
        client.calendars.get("cal_x")

    assert caught.value.status is None and caught.value.retryable


def test_naive_times_are_refused_before_any_request() -> None:
    with (
        AgentCal("avs_live_x", base_url="http://127.0.0.1:9") as client,
        pytest.raises(ValueError, match="time zone"),
    ):
        naive = datetime(2030, 1, 1, 10)  # noqa: DTZ001 — the mistake under test
        client.holds.create("cal_x", naive, naive.replace(hour=11))


def test_the_base_url_may_be_given_with_or_without_the_version() -> None:
    assert api_base_url("http://localhost:8000") == "http://localhost:8000/v1"
    assert api_base_url("https://cal.example.com/v1/") == "https://cal.example.com/v1"


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Tue, 01 Jan 2030 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Tue, 01 Jan 2030 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after("²") is None


def test_the_rate_limit_headers_are_read_only_when_whole_numbers() -> None:
    read = parse_rate_limit(
        {
            "RateLimit-Limit": "20",
            "RateLimit-Remaining": "0",
            "RateLimit-Reset": "4",
            "RateLimit-Policy": "20;w=10",
        }
    )
    assert read is not None
    assert (read.limit, read.remaining, read.reset_seconds, read.window_seconds) == (20, 0, 4, 10)
    assert read.seconds_per_request == 0.5, "a full refill (w) spread over the burst"
    without_policy = parse_rate_limit(
        {"RateLimit-Limit": "4", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"}
    )
    assert without_policy is not None and without_policy.window_seconds is None
    assert without_policy.seconds_per_request == 0.5, "Reset spread over the requests missing"
    for garbled in (
        {"RateLimit-Limit": "20", "RateLimit-Remaining": "0"},
        {"RateLimit-Limit": "20", "RateLimit-Remaining": "-1", "RateLimit-Reset": "4"},
        {"RateLimit-Limit": "0", "RateLimit-Remaining": "0", "RateLimit-Reset": "4"},
        {"RateLimit-Limit": "2.5", "RateLimit-Remaining": "0", "RateLimit-Reset": "4"},
    ):
        assert parse_rate_limit(garbled) is None, garbled
    odd_policy = parse_rate_limit(
        {
            "RateLimit-Limit": "5",
            "RateLimit-Remaining": "9",
            "RateLimit-Reset": "1",
            "RateLimit-Policy": "5;q=1",
        }
    )
    assert odd_policy is not None and odd_policy.window_seconds is None and odd_policy.remaining == 5


def test_the_pacer_queues_callers_a_token_apart_and_never_past_their_deadline() -> None:
    pacer = Pacer()
    assert pacer.reserve(at_most=60) == 0.0, "nothing seen: no wait"
    pacer.observe({"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"})

    assert pacer.reserve(at_most=0.5) == 0.0, "a wait past the deadline is not taken"
    first, second = pacer.reserve(at_most=60), pacer.reserve(at_most=60)
    assert 0.9 < first <= 1.0 and 1.9 < second <= 2.0

    pacer.observe({"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "1"})
    assert pacer.reserve(at_most=60) == 0.0, "a request is left: no wait"


def test_pacing_may_use_what_is_left_of_the_deadline_up_to_the_retry_after_cap() -> None:
    assert RetryBudget(max_retries=0, deadline_seconds=5).longest_pacing_wait() == pytest.approx(5, abs=0.1)
    assert RetryBudget(max_retries=3, deadline_seconds=600).longest_pacing_wait() == 60.0
