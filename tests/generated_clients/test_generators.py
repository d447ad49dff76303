"""The schema at /v1/schema in the hands of mainstream tools: redocly's recommended rules find no error,
and three generators (openapi-typescript with openapi-fetch, @hey-api/openapi-ts, openapi-python-client)
each give an agent written against their output, type-checked strictly and with no cast, that books
through the real server: list calendars, read availability and its ETag, hold with If-Match and an
Idempotency-Key, lose the same slot to the first agent with a typed 409, hold its first alternative,
commit it by hold_token and cancel the booking.

The generated code is made fresh from the live schema in a temporary folder, never committed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcal.api.models import IdempotencyRecord
from bookings.models import Reservation, ReservationStatus
from tests.helpers import Persona, create_calendar
from tests.node import node_bin, npm_ci

pytestmark = pytest.mark.generators

HERE = Path(__file__).resolve().parent
# Each tool's own check for new releases or usage reporting would reach for the internet.
QUIET = {"REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true", "NO_UPDATE_NOTIFIER": "1"}


@pytest.fixture(scope="module")
def schema_file(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The schema as the running server publishes it."""
    response = httpx.get(f"{live_server.url}/v1/schema", timeout=30)
    assert response.status_code == 200, response.text
    path = tmp_path_factory.mktemp("schema") / "schema.yaml"
    path.write_text(response.text)
    return path


@dataclass
class Scene:
    planner: Persona
    rival: Persona
    calendar_id: str
    base_url: str

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **QUIET,
            "AGENTCAL_BASE_URL": self.base_url,
            "AGENTCAL_KEY": self.planner.raw_key,
            "AGENTCAL_SECOND_KEY": self.rival.raw_key,
            "AGENTCAL_CALENDAR_ID": self.calendar_id,
        }


@pytest.fixture
def scene(live_server: Any, make_agent: Callable[..., Persona]) -> Scene:
    """Two agents of one workspace at the same priority (so the second is refused, not preferred)."""
    planner = make_agent("planner", priority=100)
    rival = make_agent("rival", priority=100)
    calendar = create_calendar(planner)
    return Scene(planner=planner, rival=rival, calendar_id=calendar["id"], base_url=live_server.url)


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env or {**os.environ, **QUIET}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def typescript_project(tmp_path: Path, agent: str) -> Path:
    """A folder with one agent, the project's tsconfig and its installed packages: what is generated
    goes into its `generated/`, where the agent imports it from."""
    npm_ci(HERE)
    for name in ("package.json", "tsconfig.json", agent):
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / "node_modules").symlink_to(HERE / "node_modules")
    return tmp_path


def compile_and_run_typescript(project: Path, agent: str, scene: Scene) -> list[dict[str, Any]]:
    tsc = node_bin(HERE, "tsc")
    run([tsc, "--noEmit", "-p", "."], project)  # strict, no cast in the agent: the types must fit as they are
    run([tsc, "-p", "."], project)
    node = shutil.which("node")
    assert node is not None
    output = run([node, str(Path("dist") / agent.replace(".ts", ".js"))], project, scene.env())
    return [json.loads(line) for line in output.splitlines()]


def assert_the_story(steps: list[dict[str, Any]], scene: Scene) -> None:
    assert [step["step"] for step in steps] == [
        "calendars",
        "availability",
        "hold",
        "conflict",
        "hold",
        "commit",
        "cancel",
    ], steps
    listed, availability, held, conflict, rehold, commit, cancel = steps
    assert scene.calendar_id in listed["ids"]
    assert re.fullmatch(r'"[0-9]+"', availability["etag"])
    assert held["agent"] == "planner" and held["status"] == "held"
    assert conflict["status"] == 409 and conflict["error"] == "slot_conflict"
    assert conflict["alternatives"], conflict
    first = conflict["alternatives"][0]
    assert rehold["agent"] == "rival" and rehold["status"] == "held"
    assert moment(rehold["start_time"]) == moment(first["start_time"])
    assert moment(rehold["end_time"]) == moment(first["end_time"])
    assert commit["status"] == "committed" and cancel == {**commit, "step": "cancel", "status": "cancelled"}

    # What the server keeps: the planner's hold on the contested span, the rival's booking cancelled, and
    # every write under an Idempotency-Key the generated client really sent.
    planner_hold = Reservation.objects.get(hold_id=held["id"])
    assert planner_hold.agent_id == scene.planner.agent.pk
    assert moment(held["start_time"]) == planner_hold.start_time
    booking = Reservation.objects.get(booking_id=commit["booking_id"])
    assert booking.agent_id == scene.rival.agent.pk and booking.hold_id == rehold["id"]
    assert booking.status == ReservationStatus.CANCELLED
    assert IdempotencyRecord.objects.filter(agent=scene.planner.agent).count() == 1
    assert IdempotencyRecord.objects.filter(agent=scene.rival.agent).count() >= 3


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_agents_cast_nothing() -> None:
    """The generated types must carry each agent as they are: no assertion, any, cast or ignore."""
    forbidden = {
        ".ts": re.compile(r"\bas\s+\w|\bany\b|@ts-|[\w)\]]!\."),  # `x as T`, any, @ts-ignore, `x!.y`
        ".py": re.compile(r"\bcast\(|type:\s*ignore|\bAny\b"),
    }
    agents = sorted(HERE.glob("agent_*"))
    assert len(agents) == 3
    for agent in agents:
        code = [line for line in agent.read_text().splitlines() if not line.lstrip().startswith(("//", "#"))]
        found = [line for line in code if forbidden[agent.suffix].search(line)]
        assert not found, (agent.name, found)


def test_redocly_finds_no_error_in_the_schema(schema_file: Path) -> None:
    redocly = node_bin(HERE, "redocly")
    done = subprocess.run(
        [redocly, "lint", str(schema_file), "--config", str(HERE / "redocly.yaml"), "--format", "json"],
        cwd=HERE,
        env={**os.environ, **QUIET},
        capture_output=True,
        text=True,
        timeout=120,
    )
    problems = json.loads(done.stdout)["problems"]
    errors = [problem for problem in problems if problem["severity"] == "error"]
    assert not errors, json.dumps(errors, indent=2)
    assert done.returncode == 0, done.stderr


def test_an_agent_on_openapi_typescript_types_and_openapi_fetch_books(
    schema_file: Path, scene: Scene, tmp_path: Path
) -> None:
    agent = "agent_openapi_typescript.ts"
    project = typescript_project(tmp_path, agent)
    run(
        [
            node_bin(HERE, "openapi-typescript"),
            str(schema_file),
            "--output",
            str(project / "generated" / "openapi-typescript" / "schema.d.ts"),
        ],
        project,
    )
    assert_the_story(compile_and_run_typescript(project, agent, scene), scene)


def test_an_agent_on_the_hey_api_sdk_books(schema_file: Path, scene: Scene, tmp_path: Path) -> None:
    agent = "agent_hey_api.ts"
    project = typescript_project(tmp_path, agent)
    # Run in the project: the generator reads its tsconfig (NodeNext) and writes imports Node can resolve.
    run(
        [
            node_bin(HERE, "openapi-ts"),
            "--input",
            str(schema_file),
            "--output",
            "generated/hey-api",
            "--client",
            "@hey-api/client-fetch",
            "--no-log-file",
            "--silent",
        ],
        project,
    )
    assert_the_story(compile_and_run_typescript(project, agent, scene), scene)


def test_an_agent_on_an_openapi_python_client_package_books(
    schema_file: Path, scene: Scene, tmp_path: Path
) -> None:
    agent = "agent_openapi_python_client.py"
    shutil.copy(HERE / agent, tmp_path / agent)
    bin_folder = Path(sys.executable).parent
    # Its post-generation formatting runs ruff, found on PATH.
    env = {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ.get('PATH', '')}"}
    output = run(
        [
            str(bin_folder / "openapi-python-client"),
            "generate",
            "--path",
            str(schema_file),
            "--output-path",
            str(tmp_path / "agentcal_api"),
            "--meta",
            "none",
        ],
        tmp_path,
        env,
    )
    # The one part it leaves out: the raw message (message/rfc822) has no model.
    warnings = re.findall(r"WARNING parsing (\S+ \S+)", output)
    assert set(warnings) <= {"GET /v1/inbox/messages/{message_id}/raw"}, output
    # Strict on the agent; the generated package is type-checked as used, not held to --strict itself.
    run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", agent], tmp_path)
    steps = run([sys.executable, agent], tmp_path, scene.env())
    assert_the_story([json.loads(line) for line in steps.splitlines()], scene)
