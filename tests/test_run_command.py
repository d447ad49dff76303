"""`agentcal run`'s options, refused before anything starts when they cannot work together; and Ctrl-C,
which stops a command without a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from agentcal.cli import main


def test_the_web_port_and_the_mcp_port_must_differ(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--port", "8765", "--mcp-port", "8765"])

    assert stopped.value.code == 2
    assert "--port and --mcp-port are both 8765" in capsys.readouterr().err


def test_ctrl_c_stops_a_management_command_quietly() -> None:
    """`run` starts the SMTP listener as `agentcal manage inbound_smtp`: a Ctrl-C while any such command
    runs (the listener still starting up included) ends it without a traceback."""
    command = "print('ready', flush=True); import time; time.sleep(60)"
    child = subprocess.Popen(
        [sys.executable, "-m", "agentcal.cli", "manage", "shell", "-c", command],
        env={**os.environ, "SECRET_KEY": os.environ.get("SECRET_KEY", "x")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert "ready\n" in iter(child.stdout.readline, "")  # once the command is running
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=30)

    # Ended as interrupted: 130, or by the signal itself as `python -m` reports it.
    assert child.returncode in (130, -signal.SIGINT)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
