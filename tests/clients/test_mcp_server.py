"""The MCP server as an MCP host uses it: the official `mcp` client library talking to the `agentcal-mcp`
process over stdio, and to the streamable HTTP app on a real socket, in front of the real AgentCal
(pytest-django's live server, real PostgreSQL).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import httpx2
import pytest
import uvicorn
from agentcal_mcp.gateway import Gateway
from agentcal_mcp.server import http_app
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from bookings.models import Reservation
from tests.clients.helpers import (
    READ_ONLY_SCOPES,
    READ_TOOLS,
    WRITE_TOOLS,
    FaultyProxy,
    Plan,
    content,
    every_day,
    problem,
    stdio_agent,
    utc_midnight,
)
from tests.helpers import Persona, audit_rows, create_calendar, iso, run_coroutine, slot


@pytest.fixture
def mcp_url(live_server: Any) -> Iterator[str]:
    """`agentcal-mcp --http` (the same app) in a thread, on a free port, in front of the live server."""
    with serving_mcp(live_server.url) as url:
        yield url


@pytest.fixture
def mcp_url_before() -> Iterator[Callable[[str], str]]:
    """Start the MCP HTTP server in front of the given AgentCal URL (e.g. a FaultyProxy's)."""
    with ExitStack() as servers:
        yield lambda base_url: servers.enter_context(serving_mcp(base_url))


@contextmanager
def serving_mcp(base_url: str) -> Iterator[str]:
    # Connection: close — the test live server serves keep-alive connections slowly (tests/conftest.py).
    to_agentcal = httpx.AsyncClient(headers={"Connection": "close"}, timeout=30)
    gateway = Gateway(base_url=base_url, api_key=None, http_client=to_agentcal)
    server = uvicorn.Server(uvicorn.Config(http_app(gateway), log_level="warning"))
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the MCP HTTP server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{listening.getsockname()[1]}/mcp"
    server.should_exit = True
    thread.join(10)
    listening.close()


@asynccontextmanager
async def http_session(url: str, key: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


def at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def overlaps(one: dict[str, str], other: dict[str, str]) -> bool:
    return at(one["start_time"]) < at(other["end_time"]) and at(other["start_time"]) < at(one["end_time"])


def test_over_stdio_an_agent_finds_holds_and_commits_a_slot(sdr: Persona, live_server: Any) -> None:
    calendar = create_calendar(sdr)["id"]
    window = slot(hours_ahead=24, minutes=120)
    process = stdio_agent(sdr.raw_key, live_server.url)

    async def session() -> tuple[set[str], CallToolResult, CallToolResult, CallToolResult]:
        async with Client(process) as client:
            tools = await tool_names(client)
            found = await client.call_tool(
                "find_free_slots",
                {
                    "calendars": [calendar],
                    "duration_minutes": 30,
                    "window_start": window["start_time"],
                    "window_end": window["end_time"],
                },
            )
            first_slot = content(found)["slots"][0]
            held = await client.call_tool("hold_slot", {"calendar": calendar, **first_slot, "title": "Intro"})
            hold = content(held)["hold"]
            committed = await client.call_tool(
                "commit_booking", {"hold_id": hold["id"], "hold_token": hold["hold_token"]}
            )
            return tools, found, held, committed

    tools, found, held, committed = run_coroutine(session())

    assert tools == READ_TOOLS | WRITE_TOOLS
    assert content(found)["outcome"] == "found"
    assert content(found)["slots"][0]["start_time"] == window["start_time"].replace("Z", "") + "Z"
    assert content(held)["outcome"] == "held"
    assert "commit_booking" in content(held)["next_step"]
    assert not committed.is_error
    booking = content(committed)["booking"]
    assert content(committed)["outcome"] == "committed"
    assert booking["status"] == "committed"
    reservation = Reservation.objects.get(booking_id=booking["id"])
    assert reservation.agent_id == sdr.agent.pk
    assert reservation.hold_id == content(held)["hold"]["id"]
    assert reservation.title == "Intro"
    assert [row.event_type for row in audit_rows(reservation_public_id=booking["id"])]


def test_over_http_each_session_acts_as_its_own_agent_and_the_loser_gets_alternatives(
    sdr: Persona, make_agent: Any, mcp_url: str
) -> None:
    rival = make_agent("rival", priority=100, max_priority=100)
    calendar = create_calendar(sdr)["id"]
    span = slot(hours_ahead=30, minutes=30)

    async def race() -> dict[str, CallToolResult]:
        async with (
            http_session(mcp_url, sdr.raw_key) as first,
            http_session(mcp_url, rival.raw_key) as second,
        ):
            held = await first.call_tool("hold_slot", {"calendar": calendar, **span})
            results = {
                "held": held,
                "lost_hold": await second.call_tool("hold_slot", {"calendar": calendar, **span}),
                "lost_commit": await second.call_tool("commit_booking", {"calendar": calendar, **span}),
                "wrong_token": await first.call_tool(
                    "commit_booking", {"hold_id": content(held)["hold"]["id"], "hold_token": "hlt_not_it"}
                ),
            }
            results["committed"] = await first.call_tool(
                "commit_booking",
                {"hold_id": content(held)["hold"]["id"], "hold_token": content(held)["hold"]["hold_token"]},
            )
            return results

    results = run_coroutine(race())

    assert content(results["held"])["outcome"] == "held"
    for lost in (results["lost_hold"], results["lost_commit"]):
        # A conflict is an ordinary result the model acts on, not an error string.
        assert not lost.is_error
        conflict = content(lost)
        assert conflict["outcome"] == "conflict"
        assert conflict["next_step"] == "hold one of the alternatives; do not retry the same slot"
        assert conflict["held_by_priority"] == 100
        assert conflict["conflicting"]["agent_id"] == sdr.id
        assert conflict["alternatives"]
        assert not any(overlaps(alternative, span) for alternative in conflict["alternatives"])
    wrong = results["wrong_token"]
    assert wrong.is_error
    assert content(wrong)["outcome"] == "error"
    assert content(wrong)["error"] == "not_found"
    assert "hold_token" in content(wrong)["next_step"]
    assert content(results["committed"])["outcome"] == "committed"
    # Each session acted as its own key's agent: the winner's booking, and the rival's refusals audited.
    assert Reservation.objects.get(calendar__public_id=calendar).agent_id == sdr.agent.pk
    assert not Reservation.objects.filter(agent=rival.agent).exists()
    conflicts = audit_rows(agent_public_id=rival.id, failure_reason="slot_conflict")
    assert [row.event_type for row in conflicts] == ["calendar.hold.rejected", "calendar.commit.rejected"]


def test_find_meeting_time_offers_the_times_every_required_person_is_free(sdr: Persona, mcp_url: str) -> None:
    ana, ben, cleo = (create_calendar(sdr, name=name)["id"] for name in ("Ana", "Ben", "Cleo"))
    assert (
        sdr.client.post(f"/calendars/{ana}/commits", json=slot(hours_ahead=30, minutes=30)).status_code == 201
    )
    blocked = slot(hours_ahead=30, minutes=30, offset_minutes=30)
    assert sdr.client.post(f"/calendars/{cleo}/commits", json=blocked).status_code == 201
    window = slot(hours_ahead=30, minutes=90)
    arguments = {
        "calendars": [ana, ben],
        "duration_minutes": 30,
        "window_start": window["start_time"],
        "window_end": window["end_time"],
    }

    async def ask() -> tuple[CallToolResult, CallToolResult]:
        async with http_session(mcp_url, sdr.raw_key) as session:
            found = await session.call_tool(
                "find_meeting_time", {**arguments, "optional_calendars": [cleo], "prefer_most_optional": True}
            )
            none = await session.call_tool("find_meeting_time", {**arguments, "duration_minutes": 90})
            return found, none

    found, none = run_coroutine(ask())

    times = content(found)["candidates"]
    assert content(found)["outcome"] == "found"
    assert [(t["start_time"], t["optional_free"]) for t in times] == [
        (slot(hours_ahead=30, offset_minutes=60)["start_time"], [cleo]),
        (blocked["start_time"], []),
    ]
    assert content(none)["outcome"] == "none_free"
    assert content(none)["reasons"] == {"no_common_free_time": True}


def test_a_read_only_key_is_offered_no_write_tools(make_agent: Any, mcp_url: str) -> None:
    reader = make_agent("reader", scopes=READ_ONLY_SCOPES)
    writer = make_agent("writer", scopes=["bookings:read", "bookings:write"])

    async def sessions() -> tuple[set[str], set[str], CallToolResult]:
        async with (
            http_session(mcp_url, reader.raw_key) as read_only,
            http_session(mcp_url, writer.raw_key) as booker,
        ):
            # A tool the listing hid is still refused by AgentCal when called by name.
            refused = await read_only.call_tool(
                "hold_slot", {"calendar": "cal_none", **slot(hours_ahead=30, minutes=30)}
            )
            return await tool_names(read_only), await tool_names(booker), refused

    reader_tools, writer_tools, refused = run_coroutine(sessions())

    assert reader_tools == READ_TOOLS
    assert writer_tools == {
        "find_free_slots",
        "find_meeting_time",
        "get_booking",
        "list_bookings",
        "hold_meeting",
        "hold_slot",
        "extend_hold",
        "release_hold",
        "commit_booking",
        "reschedule_booking",
        "reschedule_to_earliest",
        "cancel_booking",
    }
    assert refused.is_error
    assert content(refused)["error"] == "insufficient_scope"


def test_http_refuses_requests_without_a_valid_key(mcp_url: str) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=30) as http:
        missing = http.post(mcp_url, json=request, headers=headers)
        bad = http.post(mcp_url, json=request, headers={**headers, "Authorization": "Bearer avs_live_nope"})

    for response in (missing, bad):
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/problem+json"
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"] == "unauthenticated"


def test_hold_meeting_holds_the_best_time_and_tells_it_on_each_attendees_clock(
    sdr: Persona, mcp_url: str
) -> None:
    hours = {
        "Europe/Berlin": ("09:00", "17:00"),
        "America/New_York": ("09:00", "17:00"),
        "Asia/Kolkata": ("13:00", "21:30"),
    }
    zone_of = {
        create_calendar(sdr, name=zone, timezone=zone, working_hours=every_day(*opening))["id"]: zone
        for zone, opening in hours.items()
    }
    calendars = list(zone_of)
    day = utc_midnight(2)
    # The latest opening of the three, in UTC, is the first time everyone is at work.
    first_common = max(
        datetime.fromisoformat(f"{day:%Y-%m-%d}T{opening}").replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
        for zone, (opening, _) in hours.items()
    )
    window = {"duration_minutes": 30, "window_start": iso(day), "window_end": iso(day + timedelta(days=1))}
    early = create_calendar(sdr, name="Early", working_hours=every_day("06:00", "07:00"))["id"]

    async def plan() -> tuple[CallToolResult, CallToolResult, CallToolResult]:
        async with http_session(mcp_url, sdr.raw_key) as session:
            found = await session.call_tool(
                "find_meeting_time", {"calendars": calendars, **window, "max_times": 1}
            )
            held = await session.call_tool(
                "hold_meeting", {"calendars": calendars, **window, "title": "Kickoff"}
            )
            nothing = await session.call_tool("hold_meeting", {"calendars": [calendars[0], early], **window})
            return found, held, nothing

    found, held, nothing = run_coroutine(plan())

    (candidate,) = content(found)["candidates"]
    assert at(candidate["start_time"]) == first_common
    result = content(held)
    assert not held.is_error and result["outcome"] == "held"
    assert at(result["hold"]["start_time"]) == first_common and result["hold"]["start_time"].endswith("Z")
    assert result["candidate_rank"] == 1 and "commit_booking" in result["next_step"]
    for local in (candidate["local_times"], result["local_times"]):
        assert {entry["calendar"]: entry["timezone"] for entry in local} == zone_of
        for entry in local:
            start = datetime.fromisoformat(entry["start_time"])
            assert start == first_common
            assert start.utcoffset() == first_common.astimezone(ZoneInfo(entry["timezone"])).utcoffset()
    hold_rows = Reservation.objects.filter(hold_id=result["hold"]["id"])
    assert {row.calendar.public_id for row in hold_rows} == set(calendars)
    assert not nothing.is_error
    assert content(nothing)["outcome"] == "no_slot_found"
    assert content(nothing)["reasons"] == {"no_common_working_hours": True}
    assert "working hours never overlap" in content(nothing)["next_step"]


def test_reschedule_booking_moves_the_booking_and_offers_alternatives_on_a_conflict(
    sdr: Persona, exec_assistant: Persona, mcp_url: str
) -> None:
    ana, ben = (create_calendar(sdr, name=name, bump_window_seconds=600)["id"] for name in ("Ana", "Ben"))
    booking = sdr.client.post(
        f"/calendars/{ana}/commits", json={**slot(hours_ahead=30), "also_calendars": [ben]}
    ).json()
    taken = slot(hours_ahead=32)
    assert exec_assistant.client.post(f"/calendars/{ben}/commits", json=taken).status_code == 201
    gone = sdr.client.post(f"/calendars/{ana}/commits", json={**slot(hours_ahead=34), "priority": 100}).json()
    assert (
        exec_assistant.client.post(
            f"/calendars/{ana}/commits", json={**slot(hours_ahead=34), "priority": 900}
        ).status_code
        == 201
    )
    Reservation.objects.filter(booking_id=gone["id"]).update(ended_at=datetime.now(UTC) - timedelta(hours=25))

    async def reschedule() -> tuple[CallToolResult, CallToolResult, CallToolResult]:
        async with http_session(mcp_url, sdr.raw_key) as session:
            refused = await session.call_tool("reschedule_booking", {"booking_id": booking["id"], **taken})
            first = content(refused)["alternatives"][0]
            moved = await session.call_tool("reschedule_booking", {"booking_id": booking["id"], **first})
            too_late = await session.call_tool(
                "reschedule_booking", {"booking_id": gone["id"], **slot(hours_ahead=36)}
            )
            return refused, moved, too_late

    refused, moved, too_late = run_coroutine(reschedule())

    conflict = content(refused)
    assert not refused.is_error and conflict["outcome"] == "conflict"
    assert conflict["conflicting"]["calendar"] == ben and conflict["alternatives"]
    assert not any(overlaps(alternative, taken) for alternative in conflict["alternatives"])
    assert "reschedule_booking with one of the alternatives" in conflict["next_step"]
    result = content(moved)
    assert result["outcome"] == "rescheduled" and result["booking"]["id"] == booking["id"]
    assert at(result["booking"]["start_time"]) == at(conflict["alternatives"][0]["start_time"])
    rows = Reservation.objects.filter(booking_id=booking["id"])
    assert {(row.calendar.public_id, row.start_time) for row in rows} == {
        (calendar, at(conflict["alternatives"][0]["start_time"])) for calendar in (ana, ben)
    }
    assert too_late.is_error
    assert content(too_late)["error"] == "booking_not_live"
    assert "Book the meeting anew" in content(too_late)["next_step"]


def test_reschedule_to_earliest_moves_the_booking_to_the_first_time_its_calendars_share(
    sdr: Persona, exec_assistant: Persona, mcp_url: str
) -> None:
    ana, ben = (create_calendar(sdr, name=name)["id"] for name in ("Ana", "Ben"))
    booking = sdr.client.post(
        f"/calendars/{ana}/commits", json={**slot(hours_ahead=30), "also_calendars": [ben]}
    ).json()
    taken = slot(hours_ahead=32)
    assert exec_assistant.client.post(f"/calendars/{ben}/commits", json=taken).status_code == 201

    async def reschedule() -> tuple[CallToolResult, CallToolResult]:
        async with http_session(mcp_url, sdr.raw_key) as session:
            moved = await session.call_tool(
                "reschedule_to_earliest", {"booking_id": booking["id"], "after": taken["start_time"]}
            )
            nowhere = await session.call_tool(
                "reschedule_to_earliest",
                {"booking_id": booking["id"], "after": taken["start_time"], "before": taken["end_time"]},
            )
            return moved, nowhere

    moved, nowhere = run_coroutine(reschedule())

    result = content(moved)
    assert result["outcome"] == "rescheduled" and result["booking"]["id"] == booking["id"]
    assert at(result["booking"]["start_time"]) == at(taken["end_time"])  # right after Ben's meeting
    assert content(nowhere)["outcome"] == "no_slot_found" and not nowhere.is_error
    # Why, and what was searched, as hold_meeting says: the agent widens the window knowingly.
    assert content(nowhere)["reasons"] and at(content(nowhere)["searched"]["start"]) == at(
        taken["start_time"]
    )


# --- Paused agents and rate limits -----------------------------------------------------------------------


def test_a_paused_agent_is_told_to_stop_and_ask_its_owner_and_may_still_read(
    sdr: Persona, faulty_proxy: Callable[[Plan], FaultyProxy], mcp_url_before: Callable[[str], str]
) -> None:
    def paused_writes(index: int, method: str) -> tuple[str, int, dict[str, str], bytes]:
        if method == "GET":
            return ("forward", 0, {}, b"")
        body = problem(423, "agent_paused", paused="agent", paused_at="2030-01-07T09:15:00Z")
        return ("refuse", 423, {"Content-Type": "application/problem+json"}, body)

    proxy = faulty_proxy(paused_writes)
    mcp_url = mcp_url_before(proxy.url)

    async def act() -> tuple[CallToolResult, CallToolResult]:
        async with http_session(mcp_url, sdr.raw_key) as session:
            held = await session.call_tool("hold_slot", {"calendar": "cal_x", **slot(hours_ahead=30)})
            listed = await session.call_tool("list_calendars", {})
            return held, listed

    held, listed = run_coroutine(act())

    refused = content(held)
    assert held.is_error and refused["outcome"] == "error" and refused["error"] == "agent_paused"
    assert refused["status"] == 423 and refused["retryable"] is False
    assert refused["paused"] == "agent" and at(refused["paused_at"]) == datetime(
        2030, 1, 7, 9, 15, tzinfo=UTC
    )
    assert refused["next_step"].startswith("STOP. A person paused you")
    assert "ask them to resume you" in refused["next_step"]
    assert [seen.method for seen in proxy.seen if seen.method == "POST"] == ["POST"], "not retried"
    assert not listed.is_error and content(listed)["outcome"] == "listed"


def test_rate_limits_and_quotas_say_how_long_to_wait_and_what_to_do(
    sdr: Persona, faulty_proxy: Callable[[Plan], FaultyProxy], mcp_url_before: Callable[[str], str]
) -> None:
    refusals = [
        # Longer than the client waits by itself: the tool answers at once, with the wait.
        (problem(429, "rate_limited", limit_name="requests", retry_after=90), "90"),
        (problem(429, "rate_limited", limit_name="in_flight", retry_after=90), "90"),
        (
            problem(429, "quota_exceeded", quota="live_holds", limit=5, window_seconds=None, retry_after=90),
            "90",
        ),
    ]
    writes: list[int] = []

    def refuse_writes(index: int, method: str) -> tuple[str, int, dict[str, str], bytes]:
        if method == "GET":
            return ("forward", 0, {}, b"")
        body, retry_after = refusals[len(writes)]
        writes.append(index)
        return ("refuse", 429, {"Content-Type": "application/problem+json", "Retry-After": retry_after}, body)

    proxy = faulty_proxy(refuse_writes)
    mcp_url = mcp_url_before(proxy.url)

    async def act() -> list[CallToolResult]:
        async with http_session(mcp_url, sdr.raw_key) as session:
            return [
                await session.call_tool("hold_slot", {"calendar": "cal_x", **slot(hours_ahead=30)})
                for _ in refusals
            ]

    too_fast, too_many_at_once, too_many_holds = (content(result) for result in run_coroutine(act()))

    assert too_fast["error"] == "rate_limited" and too_fast["retry_after_seconds"] == 90
    assert "Wait 90 seconds before calling again" in too_fast["next_step"]
    assert too_many_at_once["error"] == "rate_limited"
    assert (
        "running at once" in too_many_at_once["next_step"] and "90 seconds" in too_many_at_once["next_step"]
    )
    assert too_many_holds["error"] == "quota_exceeded" and too_many_holds["retryable"] is False
    assert "as many live holds as it may (5)" in too_many_holds["next_step"]
    assert "release_hold" in too_many_holds["next_step"]
    assert len([seen for seen in proxy.seen if seen.method == "POST"]) == len(refusals), "none was retried"


def test_tool_calls_wait_for_the_agents_rate_limit(
    sdr: Persona, faulty_proxy: Callable[[Plan], FaultyProxy], mcp_url_before: Callable[[str], str]
) -> None:
    # Every answer says the bucket is empty, and one request comes back per second.
    empty = {
        "RateLimit-Limit": "2",
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": "2",
        "RateLimit-Policy": "2;w=2",
    }
    proxy = faulty_proxy(lambda index, method: ("forward", 0, empty, b""))
    mcp_url = mcp_url_before(proxy.url)

    async def read_twice() -> list[CallToolResult]:
        async with http_session(mcp_url, sdr.raw_key) as session:
            return [await session.call_tool("list_calendars", {}) for _ in range(2)]

    results = run_coroutine(read_twice())

    assert all(content(result)["outcome"] == "listed" for result in results)
    # The key's check (GET /v1/me), then each tool's request, a token apart.
    assert [seen.path.split("?")[0] for seen in proxy.seen] == ["/v1/me", "/v1/calendars", "/v1/calendars"]
    arrivals = [seen.at for seen in proxy.seen]
    assert all(later - earlier >= 1.0 for earlier, later in zip(arrivals, arrivals[1:], strict=False)), (
        arrivals
    )


def test_arguments_that_do_not_fit_get_a_structured_invalid_request(sdr: Persona, mcp_url: str) -> None:
    async def act() -> CallToolResult:
        async with http_session(mcp_url, sdr.raw_key) as session:
            return await session.call_tool("hold_slot", {"calendar": 42, "start_time": "soon"})

    result = run_coroutine(act())
    refused = content(result)
    assert result.is_error and refused["outcome"] == "error" and refused["error"] == "invalid_request"
    assert {"calendar", "start_time", "end_time"} <= set(refused["errors"]), refused["errors"]
    assert "calendar" in refused["next_step"] and "hold_slot" in refused["next_step"]
    assert "soon" not in str(refused), "the caller's values are not echoed"


def test_ctrl_c_stops_the_http_server_quietly_with_the_shells_code() -> None:
    """Ctrl-C (SIGINT) is how a person stops `agentcal-mcp --http` (and `agentcal run`, which starts it):
    it shuts down and exits 130, without a traceback in the log."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentcal_mcp",
            "--http",
            "--port",
            str(port),
            "--base-url",
            "http://127.0.0.1:9",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("agentcal-mcp --http did not listen")
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=30)
    finally:
        server.kill()

    assert server.returncode == 130
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
