"""The TypeScript client (clients/typescript) against the real server: its own tests (node --test) run
with the keys and ids made here, and the types it was generated from are the server's schema of today."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guardrails.services import agent_pause
from tests.guardrails.helpers import set_limits
from tests.helpers import Persona, create_calendar
from tests.node import npm_ci, require_node
from webhooks.signing import new_signing_secret, signed_headers
from workspaces.actor import Actor

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
GENERATED = PROJECT / "src" / "generated" / "schema.ts"


def _signed_delivery() -> str:
    """A delivery signed by the server's own signing function, for the client to verify."""
    secret = new_signing_secret()
    body = json.dumps(
        {
            "id": "evt_signedbytheserver",
            "type": "booking.committed",
            "timestamp": "2030-01-07T09:15:00Z",
            "data": {"booking": {"id": "bk_signed"}},
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    headers = signed_headers(secret=secret, msg_id="msg_signed", timestamp=int(time.time()), body=body)
    return json.dumps({"secret": secret, "body": body.decode(), "headers": headers})


def _run(command: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_typescript_client_passes_its_tests_against_the_live_server(
    live_server: Any,
    sdr: Persona,
    exec_assistant: Persona,
    make_agent: Callable[..., Persona],
    celery_worker: Any,
) -> None:
    _, npm = require_node()
    npm_ci(PROJECT)
    rival = make_agent("rival", priority=100)
    throttled = make_agent("throttled")
    # One request in the bucket, one back every half second: three at once meet a 429.
    set_limits(throttled, requests_per_second=2, request_burst=1)
    paused = make_agent("paused")
    paused_calendar = create_calendar(paused, name="Paused agent's calendar")["id"]
    owner = Actor(workspace=paused.agent.workspace, agent=None, user_email="owner@acme.example")
    assert agent_pause(actor=owner, agent=paused.agent).changed

    env = {
        **os.environ,
        "npm_config_update_notifier": "false",
        "AGENTCAL_BASE_URL": live_server.url,
        "AGENTCAL_API_KEY": sdr.raw_key,
        "AGENTCAL_AGENT_ID": sdr.agent.public_id,
        "AGENTCAL_RIVAL_KEY": rival.raw_key,
        "AGENTCAL_BOSS_KEY": exec_assistant.raw_key,
        "AGENTCAL_THROTTLED_KEY": throttled.raw_key,
        "AGENTCAL_PAUSED_KEY": paused.raw_key,
        "AGENTCAL_PAUSED_CALENDAR": paused_calendar,
        "AGENTCAL_SIGNED_DELIVERY": _signed_delivery(),
    }
    result = _run([npm, "test", "--silent"], env, timeout=180)

    assert result.returncode == 0, f"node --test failed:\n{result.stdout}\n{result.stderr}"
    assert "# fail 0" in result.stdout, result.stdout


def test_the_generated_types_are_those_of_the_current_schema(tmp_path: Path) -> None:
    node, _ = require_node()
    npm_ci(PROJECT)
    regenerated = tmp_path / "schema.ts"
    env = {**os.environ, "PYTHON": sys.executable}
    result = _run([node, "scripts/generate.mjs", "--out", str(regenerated)], env, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    assert regenerated.read_text() == GENERATED.read_text(), (
        "clients/typescript/src/generated/schema.ts is not what the server's schema generates now: "
        "run `npm run generate` in clients/typescript and commit the result"
    )
