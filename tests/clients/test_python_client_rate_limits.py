"""The Python client under the agent's rate limits, against the real server behind a proxy that adds the
RateLimit-* headers and answers 423/429 as the contract says: the budget read from every answer, the wait
for a token once none is left (threads spread one token apart, never past the call's deadline), the
paused agent's AgentPaused, and which 429s are retried."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from agentcal_client import (
    AgentCal,
    AgentPaused,
    NotFound,
    QuotaExceeded,
    RateLimit,
    RateLimited,
)

from tests.clients.helpers import FaultyProxy, Plan, async_agentcal, problem
from tests.helpers import Persona, run_coroutine

pytestmark = pytest.mark.django_db(transaction=True)

MakeClient = Callable[..., AgentCal]
Answer = tuple[str, int, dict[str, str], bytes]
PROBLEM = {"Content-Type": "application/problem+json"}


def budget(limit: int, remaining: int, reset: int, window: int | None = None) -> dict[str, str]:
    headers = {
        "RateLimit-Limit": str(limit),
        "RateLimit-Remaining": str(remaining),
        "RateLimit-Reset": str(reset),
    }
    if window is not None:
        headers["RateLimit-Policy"] = f"{limit};w={window}"
    return headers


def forward_with(headers: dict[str, str]) -> Answer:
    return ("forward", 0, headers, b"")


def gaps(proxy: FaultyProxy) -> list[float]:
    arrivals = sorted(seen.at for seen in proxy.seen)
    return [later - earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)]


def span() -> tuple[datetime, datetime]:
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    return start, start + timedelta(minutes=30)


# --- Reading the budget -----------------------------------------------------------------------------------


def test_the_client_keeps_the_budget_the_last_answer_reported(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    answers = [budget(10, 9, 1, window=5), budget(10, 8, 2), {}]
    proxy = faulty_proxy(lambda index, method: forward_with(answers[index]))
    client = agentcal_for(sdr, base_url=proxy.url)
    assert client.rate_limit is None, "nothing is known before the first answer"

    before = datetime.now(UTC)
    assert list(client.calendars.list()) == []
    first = client.rate_limit
    assert first is not None
    assert first == RateLimit(limit=10, remaining=9, reset_seconds=1, window_seconds=5, read_at=first.read_at)
    assert before <= first.read_at <= datetime.now(UTC)

    with pytest.raises(NotFound):
        client.calendars.get("cal_missing")
    after_error = client.rate_limit
    assert after_error is not None and (after_error.remaining, after_error.reset_seconds) == (8, 2)
    assert after_error.window_seconds is None, "no RateLimit-Policy on that answer"

    list(client.calendars.list())
    assert client.rate_limit is after_error, "an answer without the headers changes nothing"


# --- Pacing -------------------------------------------------------------------------------------------------


def test_with_none_left_the_next_request_waits_for_one_token(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    # A bucket of 2 refilled in 2 s gives one request back per second.
    answers = [budget(2, 0, 2, window=2), budget(2, 1, 1, window=2), budget(2, 1, 1, window=2)]
    proxy = faulty_proxy(lambda index, method: forward_with(answers[index]))
    client = agentcal_for(sdr, base_url=proxy.url)

    for _ in answers:
        list(client.calendars.list())

    after_empty, after_one_left = gaps(proxy)
    assert after_empty >= 1.0, "sent before the bucket gave a request back"
    assert after_one_left < 0.5, "a request was left: no wait"
    assert all(seen.upstream_status == 200 for seen in proxy.seen)


def test_callers_waiting_together_are_sent_one_token_apart(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    # One request back every 0.5 s; every answer reports the bucket empty.
    proxy = faulty_proxy(lambda index, method: forward_with(budget(4, 0, 2, window=2)))
    client = agentcal_for(sdr, base_url=proxy.url)
    list(client.calendars.list())
    barrier = threading.Barrier(3)

    def call() -> None:
        barrier.wait()
        list(client.calendars.list())

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    waits = gaps(proxy)
    assert len(waits) == 3
    # Each waiting caller got its own token: not three requests at once when the first comes back.
    assert all(wait >= 0.3 for wait in waits), waits
    assert sum(waits) >= 1.4, waits


def test_pacing_never_waits_past_the_calls_deadline(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    # One request back every 30 s, but the call may take at most 2 s: send, and let the server decide.
    proxy = faulty_proxy(lambda index, method: forward_with(budget(1, 0, 30, window=30)))
    client = agentcal_for(sdr, base_url=proxy.url, retry_deadline=2)

    list(client.calendars.list())
    list(client.calendars.list())

    (wait,) = gaps(proxy)
    assert wait < 1.0


def test_the_async_client_reads_the_budget_and_waits_for_a_token(
    sdr: Persona, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    answers = [budget(2, 0, 2, window=2), budget(2, 1, 1, window=2)]
    proxy = faulty_proxy(lambda index, method: forward_with(answers[index]))

    async def twice() -> RateLimit | None:
        async with async_agentcal(proxy.url, sdr.raw_key) as client:
            for _ in answers:
                [calendar async for calendar in client.calendars.list()]
            return client.rate_limit

    last = run_coroutine(twice())

    (wait,) = gaps(proxy)
    assert wait >= 1.0
    assert last is not None and (last.limit, last.remaining, last.window_seconds) == (2, 1, 2)


# --- Paused agents and the 429s -------------------------------------------------------------------------


def test_a_paused_agent_gets_agent_paused_once_and_still_reads(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    paused_at = "2030-01-07T09:15:00Z"

    def paused_writes(index: int, method: str) -> Answer:
        if method == "GET":
            return forward_with({})
        body = problem(423, "agent_paused", paused="workspace", paused_at=paused_at)
        return ("refuse", 423, PROBLEM, body)

    proxy = faulty_proxy(paused_writes)
    client = agentcal_for(sdr, base_url=proxy.url)

    with pytest.raises(AgentPaused) as caught:
        client.bookings.commit("cal_x", *span())
    calendars = list(client.calendars.list())

    paused = caught.value
    assert (paused.status, paused.code, paused.paused) == (423, "agent_paused", "workspace")
    assert paused.paused_at == datetime(2030, 1, 7, 9, 15, tzinfo=UTC)
    assert not paused.retryable
    assert [seen.method for seen in proxy.seen] == ["POST", "GET"], "the write was not repeated"
    assert calendars == []


def test_a_rate_limit_is_retried_after_retry_after_and_reported_by_name_when_it_persists(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    def busy(limit_name: str) -> Answer:
        body = problem(429, "rate_limited", limit_name=limit_name, retry_after=1, retryable=True)
        return ("refuse", 429, {**PROBLEM, "Retry-After": "1"}, body)

    plan = [busy("in_flight"), forward_with({}), busy("searches"), busy("searches")]
    proxy = faulty_proxy(lambda index, method: plan[index])
    client = agentcal_for(sdr, base_url=proxy.url, max_retries=1)

    assert list(client.calendars.list()) == []
    with pytest.raises(RateLimited) as caught:
        list(client.calendars.list())

    first, retry, *_ = proxy.seen
    assert retry.at - first.at >= 1.0
    assert len(proxy.seen) == 4, "the second call was tried twice, then gave up"
    assert type(caught.value) is RateLimited and caught.value.limit_name == "searches"
    assert caught.value.retry_after == 1.0


@pytest.mark.parametrize(
    ("quota", "limit", "window"), [("live_holds", 5, None), ("bookings_per_day", 40, 86400)]
)
def test_a_quota_is_raised_at_once_with_its_budget(
    quota: str,
    limit: int,
    window: int | None,
    sdr: Persona,
    agentcal_for: MakeClient,
    faulty_proxy: Callable[[Plan], FaultyProxy],
) -> None:
    body = problem(429, "quota_exceeded", quota=quota, limit=limit, window_seconds=window, retry_after=30)
    proxy = faulty_proxy(lambda index, method: ("refuse", 429, {**PROBLEM, "Retry-After": "30"}, body))
    client = agentcal_for(sdr, base_url=proxy.url)

    with pytest.raises(QuotaExceeded) as caught:
        client.holds.create("cal_x", *span())

    exceeded = caught.value
    assert (exceeded.quota, exceeded.limit, exceeded.window_seconds) == (quota, limit, window)
    assert exceeded.retry_after == 30.0 and not exceeded.retryable
    assert len(proxy.seen) == 1
