"""The Python client against the real server: races, lost responses, Retry-After, held holds, eviction,
the async twin, pagination and webhook signatures."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from agentcal_client import (
    AgentCal,
    Booking,
    Hold,
    HoldEvicted,
    HoldSession,
    MeetingTimes,
    NotFound,
    QuotaExceeded,
    RateLimited,
    SlotConflict,
    webhooks,
)

from tests.clients.helpers import FaultyProxy, Plan, async_agentcal, forward_everything, problem
from tests.helpers import Persona, overlapping_live_pairs, run_coroutine
from tests.webhooks.helpers import Receiver
from workspaces.models import Scope

pytestmark = pytest.mark.django_db(transaction=True)

MakeClient = Callable[..., AgentCal]


def span(hours_ahead: int = 24, minutes: int = 30, *, offset_minutes: int = 0) -> tuple[datetime, datetime]:
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=hours_ahead)
    start = base + timedelta(minutes=offset_minutes)
    return start, start + timedelta(minutes=minutes)


# --- Races -------------------------------------------------------------------------------------------------


@pytest.mark.concurrency
def test_ten_racing_agents_get_one_hold_and_nine_slot_conflicts_with_alternatives(
    make_agent: Callable[..., Persona], agentcal_for: MakeClient
) -> None:
    racers = [agentcal_for(make_agent(f"racer-{n}")) for n in range(10)]
    calendar = racers[0].calendars.create("Shared calendar")
    start, end = span()
    barrier = threading.Barrier(len(racers))
    outcomes: list[Hold | SlotConflict] = []
    lock = threading.Lock()

    def race(client: AgentCal) -> None:
        barrier.wait()
        try:
            outcome: Hold | SlotConflict = client.holds.create(calendar.id, start, end)
        except SlotConflict as conflict:
            outcome = conflict
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=race, args=(client,)) for client in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    winners = [o for o in outcomes if isinstance(o, Hold)]
    conflicts = [o for o in outcomes if isinstance(o, SlotConflict)]
    assert len(winners) == 1 and len(conflicts) == 9, outcomes
    assert winners[0].status == "held" and winners[0].start_time == start
    for conflict in conflicts:
        assert conflict.status == 409 and conflict.code == "slot_conflict"
        assert conflict.held_by_priority == 100 and conflict.caller_priority == 100
        assert conflict.conflicting["start_time"]
        assert conflict.alternatives, "a conflict offers other slots"
        assert all(slot.end_time - slot.start_time == end - start for slot in conflict.alternatives)
        assert all(not (slot.start_time < end and start < slot.end_time) for slot in conflict.alternatives)
    assert overlapping_live_pairs(calendar.id) == []


# --- Retries ----------------------------------------------------------------------------------------------


def test_a_lost_response_is_retried_with_the_same_idempotency_key_and_books_once(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    def lose_the_first_answer(index: int, method: str) -> tuple[str, int, dict[str, str], bytes]:
        if index == 0:  # the server books; the client gets a 503 instead of the booking
            return (
                "lose",
                503,
                {"Content-Type": "application/problem+json", "Retry-After": "0"},
                problem(503, "service_unavailable", retryable=True),
            )
        return forward_everything(index, method)

    proxy = faulty_proxy(lose_the_first_answer)
    client = agentcal_for(sdr, base_url=proxy.url)
    calendar = agentcal_for(sdr).calendars.create("Shared calendar")
    start, end = span()

    booking = client.bookings.commit(calendar.id, start, end, title="Intro call")

    first, retry = proxy.seen
    assert first.upstream_status == 201 and retry.upstream_status == 201
    assert first.headers["idempotency-key"] == retry.headers["idempotency-key"]
    assert retry.upstream_headers.get("idempotent-replayed") == "true"
    assert booking.id == json.loads(first.upstream_body)["id"]
    assert [b.id for b in agentcal_for(sdr).bookings.list(calendar.id)] == [booking.id]


def test_a_retry_waits_as_long_as_retry_after_says(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    def rate_limit_once(index: int, method: str) -> tuple[str, int, dict[str, str], bytes]:
        if index == 0:
            return (
                "refuse",
                429,
                {"Content-Type": "application/problem+json", "Retry-After": "2"},
                problem(429, "rate_limited"),
            )
        return forward_everything(index, method)

    proxy = faulty_proxy(rate_limit_once)
    calendars = list(agentcal_for(sdr, base_url=proxy.url).calendars.list())

    assert calendars == []
    first, retry = proxy.seen
    assert retry.at - first.at >= 2.0


def test_conflicts_and_quotas_are_not_retried(
    sdr: Persona, agentcal_for: MakeClient, faulty_proxy: Callable[[Plan], FaultyProxy]
) -> None:
    answers = [
        (409, problem(409, "slot_conflict", alternatives=[])),
        (412, problem(412, "precondition_failed")),
        (422, problem(422, "booking_too_long", max_allowed_minutes=480)),
        (429, problem(429, "quota_exceeded", quota="daily_sends", limit=0, window_seconds=86400)),
    ]

    def refuse(index: int, method: str) -> tuple[str, int, dict[str, str], bytes]:
        status, body = answers[index]
        return ("refuse", status, {"Content-Type": "application/problem+json", "Retry-After": "0"}, body)

    proxy = faulty_proxy(refuse)
    client = agentcal_for(sdr, base_url=proxy.url)
    start, end = span()
    raised = []
    for _ in answers:
        with pytest.raises(Exception) as caught:
            client.bookings.commit("cal_x", start, end)
        raised.append(type(caught.value).__name__)

    assert raised == ["SlotConflict", "PreconditionFailed", "BookingTooLong", "QuotaExceeded"]
    assert len(proxy.seen) == len(answers), "each refusal was final: no request was repeated"
    assert issubclass(QuotaExceeded, RateLimited)


# --- Holds kept alive ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_heartbeat_keeps_a_six_second_hold_alive_for_fourteen_seconds(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Shared calendar")
    start, end = span()

    # A beat every 2 s (a third of the TTL): a test process stalled for up to 4 s on a loaded CI machine
    # still keeps the hold, and 14 s outlives the TTL twice over.
    with client.hold(calendar.id, start, end, ttl_seconds=6) as session:
        time.sleep(14)
        assert client.holds.get(session.id).status == "held"
        # Still blocking: an agent of equal priority cannot take the slot.
        with pytest.raises(SlotConflict):
            agentcal_for(exec_assistant).holds.create(calendar.id, start, end, priority=100)
        booking = session.commit()

    assert booking.status == "committed" and booking.hold_id == session.id
    beats = [r for r in _audit(client, "calendar.hold.extended") if r.reservation == session.id]
    assert len(beats) >= 5  # one every 2 s


def test_an_exception_inside_the_block_releases_the_hold(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Shared calendar")
    start, end = span()

    with (
        pytest.raises(RuntimeError, match="inference failed"),
        client.hold(calendar.id, start, end) as session,
    ):
        raise RuntimeError("inference failed")

    assert client.holds.get(session.id).status == "released"
    other = agentcal_for(exec_assistant).holds.create(calendar.id, start, end, priority=100)
    assert other.status == "held"


def test_leaving_the_block_without_commit_releases_the_hold(sdr: Persona, agentcal_for: MakeClient) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Shared calendar")
    start, end = span()

    with client.hold(calendar.id, start, end) as session:
        pass

    assert client.holds.get(session.id).status == "released"


def test_eviction_by_a_higher_priority_agent_surfaces_as_hold_evicted_on_commit(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Shared calendar")
    start, end = span()

    with client.hold(calendar.id, start, end, ttl_seconds=30) as session:
        winner = agentcal_for(exec_assistant).holds.create(calendar.id, start, end, priority=600)
        with pytest.raises(HoldEvicted) as evicted:
            session.commit()
        # Handled here, so leaving the block raises nothing more.

    assert evicted.value.status == 409 and evicted.value.code == "hold_evicted"
    assert client.holds.get(session.id).status == "evicted"
    assert client.holds.get(winner.id).status == "held"


def test_an_eviction_the_heartbeat_saw_is_raised_when_leaving_the_block(
    sdr: Persona, exec_assistant: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Shared calendar")
    start, end = span()

    with pytest.raises(HoldEvicted), client.hold(calendar.id, start, end, ttl_seconds=3) as session:
        agentcal_for(exec_assistant).holds.create(calendar.id, start, end, priority=600)
        deadline = time.monotonic() + 5
        while session._failure is None and time.monotonic() < deadline:  # the next beat (within 1 s)
            time.sleep(0.05)
        with pytest.raises(HoldEvicted):
            session.check()
        session._reported = False  # as if the agent had not looked: the exit must still say it

    assert isinstance(session, HoldSession)


def test_the_async_client_holds_and_commits(sdr: Persona, live_server: Any) -> None:
    start, end = span()

    async def book() -> tuple[Hold, Booking]:
        async with async_agentcal(live_server.url, sdr.raw_key) as client:
            calendar = await client.calendars.create("Shared calendar")
            async with client.hold(calendar.id, start, end, ttl_seconds=3, title="Sync") as session:
                await asyncio.sleep(1.5)  # past one heartbeat
                booking = await session.commit()
            return session.hold, booking

    hold, booking = run_coroutine(book())

    assert booking.status == "committed" and booking.hold_id == hold.id and booking.title == "Sync"
    assert booking.fencing_token == hold.fencing_token
    assert hold.expires_at is not None and hold.expires_at > hold.created_at + timedelta(seconds=3)


# --- Reading ------------------------------------------------------------------------------------------------


def test_list_methods_follow_the_cursor_through_every_page(sdr: Persona, agentcal_for: MakeClient) -> None:
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Shared calendar")
    booked = [client.bookings.commit(calendar.id, *span(24 + hour)).id for hour in range(5)]

    listed = [booking.id for booking in client.bookings.list(calendar.id, limit=2)]

    assert sorted(listed) == sorted(booked)


def test_find_free_slot_finds_the_first_span_free_in_every_calendar(
    sdr: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    first = client.calendars.create("Ana")
    second = client.calendars.create("Ben")
    start, _ = span(24, 0)
    client.bookings.commit(first.id, start, start + timedelta(minutes=30))
    client.bookings.commit(second.id, start + timedelta(minutes=30), start + timedelta(minutes=60))

    found = client.find_free_slot(
        [first.id, second.id], timedelta(minutes=30), start, start + timedelta(hours=2)
    )

    assert found is not None
    assert (found.start_time, found.end_time) == (
        start + timedelta(minutes=60),
        start + timedelta(minutes=90),
    )
    assert (
        client.find_free_slot([first.id, second.id], timedelta(hours=2), start, start + timedelta(hours=2))
        is None
    )


def test_find_meeting_time_asks_the_server_for_the_common_free_spans(
    sdr: Persona, agentcal_for: MakeClient
) -> None:
    client = agentcal_for(sdr)
    ana, ben, cleo = (client.calendars.create(name) for name in ("Ana", "Ben", "Cleo"))
    start, _ = span(24, 0)
    client.bookings.commit(ana.id, start, start + timedelta(minutes=30))
    client.bookings.commit(cleo.id, start + timedelta(minutes=60), start + timedelta(minutes=90))

    found = client.find_meeting_time(
        [ana.id, ben.id],
        timedelta(minutes=30),
        start,
        start + timedelta(hours=2),
        optional_calendars=[cleo.id],
        order="most_optional",
        limit=2,
    )
    nothing = client.find_meeting_time([ana.id], timedelta(minutes=30), start, start + timedelta(minutes=30))

    assert [(c.start_time, c.optional_free) for c in found.candidates] == [
        (start + timedelta(minutes=30), (cleo.id,)),
        (start + timedelta(minutes=90), (cleo.id,)),
    ]
    assert found.candidates[0].calendars == (ana.id, ben.id)
    assert found.truncated is True and found.reasons is None
    assert found.versions == {c.id: client.calendars.get(c.id).version for c in (ana, ben, cleo)}
    assert nothing.candidates == () and nothing.reasons == {"no_common_free_time": True}


def test_the_async_client_finds_a_meeting_time(sdr: Persona, live_server: Any) -> None:
    start, _ = span(24, 0)

    async def find() -> MeetingTimes:
        async with async_agentcal(live_server.url, sdr.raw_key) as client:
            calendar = await client.calendars.create("Ana")
            await client.bookings.commit(calendar.id, start, start + timedelta(minutes=30))
            return await client.find_meeting_time(
                [calendar.id], timedelta(minutes=30), start, start + timedelta(hours=1)
            )

    found = run_coroutine(find())

    assert [c.start_time for c in found.candidates] == [start + timedelta(minutes=30)]
    assert found.searched.start == start


def test_a_missing_object_is_not_found(sdr: Persona, agentcal_for: MakeClient) -> None:
    with pytest.raises(NotFound) as caught:
        agentcal_for(sdr).holds.get("hld_doesnotexist")

    assert caught.value.status == 404 and caught.value.request_id


# --- Webhooks -----------------------------------------------------------------------------------------------


def test_webhook_verify_accepts_the_servers_signature_and_rejects_a_tampered_body(
    sdr: Persona, agentcal_for: MakeClient, receiver: Receiver, celery_worker: Any
) -> None:
    created = sdr.client.post("/webhook-endpoints", json={"url": receiver.url, "events": ["hold.created"]})
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    client = agentcal_for(sdr)
    calendar = client.calendars.create("Shared calendar")
    hold = client.holds.create(calendar.id, *span())

    (delivery,) = receiver.wait_for(1)
    payload = webhooks.verify(delivery.body, delivery.headers, secret)

    assert payload["type"] == "hold.created" and payload["data"]["hold"]["id"] == hold.id
    tampered = delivery.body.replace(hold.id.encode(), b"hld_someoneelse")
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(tampered, delivery.headers, secret)
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(delivery.body, delivery.headers, "whsec_" + "A" * 32)
    stale = {**delivery.headers, "webhook-timestamp": str(int(time.time()) - 3600)}
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(delivery.body, stale, secret)


def _audit(client: AgentCal, event_type: str) -> list[Any]:
    return list(client.audit.list(event_type=event_type))


def test_a_client_learns_who_its_key_is_and_its_limits(sdr: Persona, agentcal_for: MakeClient) -> None:
    client = agentcal_for(sdr)
    identity = client.me()
    assert identity.agent.id == sdr.agent.public_id and identity.workspace.slug == "acme"
    assert set(identity.key.scopes) == set(Scope.values)
    assert identity.paused is None
    assert identity.limits.requests_per_second > 0 and identity.limits.request_burst >= 1
    # The same budget, as the answer's RateLimit-* headers told it.
    budget = client.rate_limit
    assert budget is not None and budget.limit == identity.limits.request_burst
    assert 0 <= budget.remaining <= budget.limit and budget.read_at <= datetime.now(UTC)
