"""The README's and docs/agents.md's examples run verbatim against the live server, as a reader runs them.

Which blocks run is marked in the document itself, by an HTML comment on the line right before the fence
(invisible once rendered):

    <!-- runs: python -->            run alone by the project's python, with only the environment the doc's
                                     setup names (AGENTCAL_API_KEY, AGENTCAL_BASE_URL, ...)
    <!-- runs: bash -->              run alone by `bash -e -o pipefail` (fence `bash` or `sh`), with KEY, API
    <!-- runs: bash, continues -->   run after the document's earlier marked bash blocks, back to the last one
                                     without `continues`, in one shell: the doc says the blocks follow on
    <!-- runs: typescript -->        compiled with the TypeScript client's own tsc and run by node, importing
                                     `agentcal` from clients/typescript (skipped until that client exists)

Unmarked blocks are illustrative: JSON shapes, configuration excerpts, commands that install packages, start
the service, need the dashboard, a model provider or a public host. Every marked block has an outcome check
below (what the example promises, read from its output and the database): a block that merely did not fail
proves little, so a marked block without a check fails `test_every_marked_block_has_a_check`.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentcal.api.models import IdempotencyRecord
from bookings.models import Calendar, Reservation
from inboxes.models import Message
from inboxes.smtp import inbound_controller
from tests.helpers import Persona, create_calendar, slot
from tests.inboxes.helpers import free_port
from tests.node import npm_ci, require_node
from webhooks.models import OutboxEvent
from webhooks.outbox import webhook_body
from webhooks.signing import signed_headers

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "docs/agents.md")
TYPESCRIPT_CLIENT = ROOT / "clients" / "typescript"

MARKER = re.compile(r"<!-- runs: (?P<kind>python|bash|typescript)(?P<continues>, continues)? -->")
FENCE_LANGUAGES = {"python": {"python"}, "bash": {"bash", "sh"}, "typescript": {"typescript", "ts"}}


@dataclass(frozen=True)
class Block:
    """A marked code block: `id` is the document and the heading it is under (`-2` for a second one)."""

    id: str
    kind: str
    language: str
    code: str
    continues: bool
    line: int


def slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def marked_blocks(document: str) -> list[Block]:
    lines = (ROOT / document).read_text().splitlines()
    blocks: list[Block] = []
    heading, in_fence, seen_under_heading = "", False, 0
    for number, line in enumerate(lines):
        if line.startswith("```"):
            if not in_fence and number > 0 and (marker := MARKER.fullmatch(lines[number - 1])):
                end = lines.index("```", number + 1)
                seen_under_heading += 1
                suffix = f"-{seen_under_heading}" if seen_under_heading > 1 else ""
                blocks.append(
                    Block(
                        id=f"{document}#{slug(heading)}{suffix}",
                        kind=marker["kind"],
                        language=line[3:].strip(),
                        code="\n".join(lines[number + 1 : end]) + "\n",
                        continues=marker["continues"] is not None,
                        line=number + 1,
                    )
                )
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            heading, seen_under_heading = line.lstrip("#").strip(), 0
    return blocks


BLOCKS = [block for document in DOCUMENTS for block in marked_blocks(document)]


def session_of(block: Block) -> list[Block]:
    """The blocks a shell runs for `block`: from the last marked bash block of its document that starts a
    session, up to and including `block`."""
    same_kind = [b for b in BLOCKS if b.id.split("#")[0] == block.id.split("#")[0] and b.kind == block.kind]
    before = same_kind[: same_kind.index(block) + 1]
    starts = [i for i, b in enumerate(before) if not b.continues]
    assert starts, f"{block.id} continues a session, but no marked {block.kind} block before it starts one"
    return before[starts[-1] :]


# --- Outcome checks: one per marked block -------------------------------------------------------------------


@dataclass
class Reader:
    """What a reader of the docs has after their setup: an agent's key (the SDR's) and the server's URL. The
    other agent (an executive assistant who outranks the SDR) is there for examples that react to another
    agent's write; `request` gives a check the fixtures of what else `agentcal run` runs (a Celery worker)."""

    sdr: Persona
    exec_assistant: Persona
    base_url: str
    request: pytest.FixtureRequest


@dataclass
class Setup:
    """What a check prepares before its block runs: environment the doc tells the reader to set, and Python
    to run after the block in its process (a block that only defines a handler is driven by it)."""

    env: dict[str, str] = field(default_factory=dict)
    then: str = ""


# A check yields the block's setup, is sent the block's output (stdout) and asserts what the example promised.
Check = Callable[[Reader], Generator[Setup, str, None]]
CHECKS: dict[str, Check] = {}


def check(block_id: str) -> Callable[[Check], Check]:
    def register(function: Check) -> Check:
        CHECKS[block_id] = function
        return function

    return register


def booked_id(output: str) -> str:
    found = re.search(r"^booked (\S+)", output, re.MULTILINE)
    assert found is not None, output
    return found.group(1)


def tomorrow() -> date:
    return (datetime.now(UTC) + timedelta(days=1)).date()


def at(day: date, clock: str) -> datetime:
    return datetime.fromisoformat(f"{day.isoformat()}T{clock}:00+00:00")


@check("docs/agents.md#an-agent-loop-with-the-client")
def the_agent_loop_books_a_slot_on_both_calendars(reader: Reader) -> Generator[Setup, str, None]:
    output = yield Setup()
    rows = Reservation.objects.filter(booking_id=booked_id(output)).select_related("calendar")
    assert {(row.calendar.name, row.status) for row in rows} == {("Ana", "committed"), ("Ben", "committed")}
    # decide() took it: a time before the day after tomorrow, half an hour long.
    (span,) = {(row.start_time, row.end_time) for row in rows}
    assert span[0] < datetime.now(UTC) + timedelta(days=2) and span[1] - span[0] == timedelta(minutes=30)


@check("docs/agents.md#the-same-loop-in-typescript")
def the_typescript_loop_books_a_slot_on_both_calendars(reader: Reader) -> Generator[Setup, str, None]:
    output = yield Setup()
    rows = Reservation.objects.filter(booking_id=booked_id(output)).select_related("calendar")
    assert {(row.calendar.name, row.status) for row in rows} == {("Ana", "committed"), ("Ben", "committed")}
    # The client sent an Idempotency-Key with each write (two calendars, the hold, the commit).
    assert IdempotencyRecord.objects.filter(agent=reader.sdr.agent).count() >= 4


@check("docs/agents.md#a-meeting-across-time-zones")
def the_meeting_is_booked_at_the_first_candidate_inside_everyones_hours(
    reader: Reader,
) -> Generator[Setup, str, None]:
    output = yield Setup()
    rows = Reservation.objects.filter(booking_id=booked_id(output)).select_related("calendar")
    assert {row.calendar.name for row in rows} == {"Ana", "Ben", "Ravi"}
    assert {row.status for row in rows} == {"committed"}
    (start, end) = {(row.start_time, row.end_time) for row in rows}.pop()
    # The best candidate was still free: the hold took the first one the search listed.
    first_candidate = re.search(r"^candidate (\S+)", output, re.MULTILINE)
    assert first_candidate is not None and datetime.fromisoformat(first_candidate.group(1)) == start
    for row in rows:  # every person's local start and end inside the hours they were given, on a weekday
        assert row.calendar.working_hours is not None
        local_start = start.astimezone(ZoneInfo(row.calendar.timezone))
        local_end = end.astimezone(ZoneInfo(row.calendar.timezone))
        (hours,) = row.calendar.working_hours[local_start.strftime("%a").lower()]
        assert hours[0] <= local_start.strftime("%H:%M") and local_end.strftime("%H:%M") <= hours[1]
        assert f"{row.calendar.name}: {local_start:%a %d %b %H:%M} ({row.calendar.timezone})" in output


@check("docs/agents.md#from-async-code")
def the_async_client_holds_and_commits(reader: Reader) -> Generator[Setup, str, None]:
    output = yield Setup()
    (row,) = Reservation.objects.filter(booking_id=booked_id(output)).select_related("calendar")
    assert (row.calendar.name, row.status) == ("Support rota", "committed")
    assert f"on {row.calendar.public_id}" in output


@check("docs/agents.md#when-a-booking-is-bumped")
def the_bumped_booking_moves_back_to_the_events_first_alternative(
    reader: Reader,
) -> Generator[Setup, str, None]:
    secret = "whsec_" + base64.b64encode(b"agents-md-example-secret").decode()
    calendar = create_calendar(reader.sdr, bump_window_seconds=600)["id"]
    span = slot(minutes=30)
    victim = reader.sdr.client.post(f"/calendars/{calendar}/commits", json={**span, "priority": 100}).json()
    taker = reader.exec_assistant.client.post(
        f"/calendars/{calendar}/commits", json={**span, "priority": 900}
    )
    assert taker.status_code == 201, taker.text
    (event,) = OutboxEvent.objects.filter(event_type="booking.bumped")
    body = webhook_body(event)
    headers = signed_headers(secret=secret, msg_id=event.public_id, timestamp=int(time.time()), body=body)
    delivery = json.dumps({"body": body.decode(), "headers": headers})

    output = yield Setup(
        env={"AGENTCAL_WEBHOOK_SECRET": secret, "DOCS_DELIVERY": delivery},
        then=(
            "import json as _json, os as _os\n"
            "_delivery = _json.loads(_os.environ['DOCS_DELIVERY'])\n"
            "on_delivery(_delivery['body'].encode(), _delivery['headers'])\n"
            "on_delivery(_delivery['body'].encode(), _delivery['headers'])  # redelivered: replayed\n"
        ),
    )

    first = event.payload["alternatives"][0]
    rows = Reservation.objects.filter(booking_id=victim["id"])
    assert {(row.status, row.start_time) for row in rows} == {
        ("committed", datetime.fromisoformat(first["start_time"]))
    }
    assert OutboxEvent.objects.filter(event_type="booking.moved").count() == 1
    assert output.count(f"moved {victim['id']}") == 2  # the redelivery answered with the same move


@check("README.md#walk-through-with-curl")
def the_walk_through_holds_extends_commits_and_is_refused_the_taken_slot(
    reader: Reader,
) -> Generator[Setup, str, None]:
    output = yield Setup()
    (row,) = Reservation.objects.filter(calendar__name="Sales team").exclude(booking_id=None)
    assert (row.status, row.title, row.start_time) == ("committed", "Intro call", at(tomorrow(), "14:00"))
    assert re.search(r'^etag: "0"', output, re.MULTILINE | re.IGNORECASE), output
    assert '"error":"slot_conflict"' in output.replace(" ", ""), output
    audit = json.loads(output[output.rindex('{"results"') :])["results"]  # the last answer: the audit trail
    assert [
        (record["event_type"], record["outcome"])
        for record in audit
        if record["event_type"] != "calendar.created"
    ] == [
        ("calendar.hold.rejected", "rejected"),
        ("calendar.commit.created", "success"),
        ("calendar.hold.extended", "success"),
        ("calendar.hold.created", "success"),
    ]


@check("README.md#scheduling-across-people")
def the_rules_are_set_on_anas_calendar(reader: Reader) -> Generator[Setup, str, None]:
    yield Setup()
    ana = Calendar.objects.get(name="Ana")
    assert (ana.timezone, ana.min_notice_minutes, ana.buffer_after_minutes) == ("Europe/Berlin", 120, 10)
    assert ana.working_hours is not None and ana.working_hours["mon"] == [
        ["09:00", "12:30"],
        ["13:30", "17:00"],
    ]
    assert ana.date_overrides["2026-12-24"] == []


@check("README.md#scheduling-across-people-2")
def the_search_finds_times_and_find_and_hold_holds_the_best_on_three_calendars(
    reader: Reader,
) -> Generator[Setup, str, None]:
    output = yield Setup()
    assert '"candidates":[{' in output.replace(" ", ""), output
    rows = list(Reservation.objects.filter(status="held", title="Intro call").select_related("calendar"))
    assert {row.calendar.name for row in rows} == {"Ana", "Ben", "Raj"}
    assert len({row.hold_id for row in rows}) == 1
    berlin = rows[0].start_time.astimezone(ZoneInfo("Europe/Berlin"))
    assert berlin.weekday() < 5 and "09:00" <= berlin.strftime("%H:%M") < "17:00"
    assert rows[0].start_time >= datetime.now(UTC) + timedelta(minutes=120)  # Ana's notice


@check("README.md#rescheduling")
def the_booking_moves_to_the_new_span(reader: Reader) -> Generator[Setup, str, None]:
    yield Setup()
    (row,) = Reservation.objects.filter(calendar__name="Sales team").exclude(booking_id=None)
    assert (row.status, row.start_time) == ("committed", at(tomorrow(), "15:00"))
    assert OutboxEvent.objects.filter(event_type="booking.moved").count() == 1


@check("README.md#deciding-on-fresh-upstream-data")
def the_hold_with_a_staleness_bound_is_placed(reader: Reader) -> Generator[Setup, str, None]:
    yield Setup()
    assert Reservation.objects.filter(
        calendar__name="Sales team", status="held", start_time=at(tomorrow(), "16:00")
    ).exists()


@check("README.md#walk-through-receive-reply")
def the_agent_receives_mail_and_its_reply_is_kept_unsent_without_a_relay(
    reader: Reader,
) -> Generator[Setup, str, None]:
    reader.request.getfixturevalue("settings").INBOX_RELAY_CONFIGURED = False  # no EMAIL_URL here
    reader.request.getfixturevalue("celery_worker")  # parses what arrives, delivers what is sent
    port = free_port()
    listener = inbound_controller("127.0.0.1", port)
    listener.start()
    reader.request.addfinalizer(listener.stop)

    output = yield Setup(env={"INBOUND_SMTP_PORT": str(port)})

    received = Message.objects.get(direction="inbound", agent=reader.sdr.agent)
    assert received.subject == "Meeting next week?"
    assert received.from_address == {"name": "Ana", "address": "ana@example.com"}
    reply = Message.objects.get(direction="outbound", agent=reader.sdr.agent)
    assert (reply.status, reply.thread_id) == ("not_sent_no_relay", received.thread_id)
    assert reply.in_reply_to == received.message_id
    assert re.search(r'"status": ?"not_sent_no_relay"', output), output  # what the last call shows


# --- Running a block as a reader would ---------------------------------------------------------------------


def run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    # Only what a reader's shell has, plus what the doc's setup names: nothing of the test process leaks in.
    base = {"PATH": os.environ["PATH"], "HOME": str(cwd), "LANG": "C.UTF-8"}
    try:
        # Under the test's own timeout, so a block that hangs (waiting for mail, say) shows its output.
        done = subprocess.run(
            command, cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=90, check=False
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(
            f"still running after {hung.timeout} s\n--- stdout\n{hung.stdout!r}\n--- stderr\n{hung.stderr!r}"
        )
    assert done.returncode == 0, (
        f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done.stdout


def run_python(block: Block, setup: Setup, reader: Reader, folder: Path) -> str:
    script = folder / "example.py"
    script.write_text(block.code + ("\n" + setup.then if setup.then else ""))
    env = {
        "AGENTCAL_API_KEY": reader.sdr.raw_key,
        "AGENTCAL_BASE_URL": reader.base_url,
        # This checkout's client, as `pip install -e clients/python` gives it.
        "PYTHONPATH": str(ROOT / "clients" / "python"),
        **setup.env,
    }
    return run([sys.executable, str(script)], env, folder)


def run_bash(block: Block, setup: Setup, reader: Reader, folder: Path) -> str:
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not installed: the README's shell examples need them (.ci/run installs jq)"
        )
    script = folder / "example.sh"
    script.write_text("\n".join(b.code for b in session_of(block)))
    env = {"KEY": reader.sdr.raw_key, "API": f"{reader.base_url}/v1", **setup.env}
    return run(["bash", "-e", "-o", "pipefail", str(script)], env, folder)


def run_typescript(block: Block, setup: Setup, reader: Reader, folder: Path) -> str:
    if not (TYPESCRIPT_CLIENT / "package.json").exists():
        pytest.skip("no TypeScript client in this checkout yet (clients/typescript/package.json)")
    node, npm = require_node()
    modules = npm_ci(TYPESCRIPT_CLIENT)
    with open(TYPESCRIPT_CLIENT / ".npm-ci.lock", "w") as mutex:  # one build at a time across test processes
        fcntl.flock(mutex, fcntl.LOCK_EX)
        if "build" in json.loads((TYPESCRIPT_CLIENT / "package.json").read_text()).get("scripts", {}):
            subprocess.run([npm, "run", "build", "--silent"], cwd=TYPESCRIPT_CLIENT, check=True, timeout=300)
    # `import { AgentCal } from "agentcal"` finds this checkout's client, as `npm install agentcal` would.
    (folder / "node_modules").mkdir()
    (folder / "node_modules" / "agentcal").symlink_to(TYPESCRIPT_CLIENT)
    (folder / "package.json").write_text('{"type": "module"}')
    (folder / "example.mts").write_text(block.code)
    types = ["--types", "node"] if (modules / "@types" / "node").exists() else []
    run(
        [
            str(modules / ".bin" / "tsc"),
            *("--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022"),
            *("--strict", "--skipLibCheck", "--typeRoots", str(modules / "@types"), *types),
            *("--outDir", str(folder / "out"), str(folder / "example.mts")),
        ],
        {},
        folder,
    )
    env = {"AGENTCAL_API_KEY": reader.sdr.raw_key, "AGENTCAL_BASE_URL": reader.base_url, **setup.env}
    return run([node, str(folder / "out" / "example.mjs")], env, folder)


RUNNERS = {"python": run_python, "bash": run_bash, "typescript": run_typescript}


# --- The tests ----------------------------------------------------------------------------------------------


def test_every_marked_block_has_a_check_and_every_check_a_block() -> None:
    assert sorted(CHECKS) == sorted(block.id for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_the_marker_matches_the_fence(block: Block) -> None:
    assert block.language in FENCE_LANGUAGES[block.kind], f"line {block.line}: ```{block.language}"
    assert not (block.continues and block.kind != "bash"), "only a shell session continues"
    if block.kind == "bash":
        session_of(block)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_the_example_runs_and_does_what_it_says(
    block: Block,
    sdr: Persona,
    exec_assistant: Persona,
    live_server: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    reader = Reader(sdr=sdr, exec_assistant=exec_assistant, base_url=live_server.url, request=request)
    outcome = CHECKS[block.id](reader)
    setup = next(outcome)
    output = RUNNERS[block.kind](block, setup, reader, tmp_path)
    with pytest.raises(StopIteration):
        outcome.send(output)
