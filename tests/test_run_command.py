"""`agentcal run`'s options, refused before anything starts when they cannot work together."""

from __future__ import annotations

import pytest

from agentcal.cli import main


def test_the_web_port_and_the_mcp_port_must_differ(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--port", "8765", "--mcp-port", "8765"])

    assert stopped.value.code == 2
    assert "--port and --mcp-port are both 8765" in capsys.readouterr().err
