"""The configuration `agentcal run` and the production command give gunicorn, on a real gunicorn."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import http_client
from tests.helpers import test_database_url as database_url_for_children

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_server_opens_no_control_socket_another_server_could_share(tmp_path: Path) -> None:
    from bench.server import GunicornServer

    runtime = tmp_path / "run"
    runtime.mkdir()
    with (
        GunicornServer(
            "agentcal.wsgi:application",
            workers=1,
            health_path="/v1/health",
            env={
                "DATABASE_URL": database_url_for_children(),
                "XDG_RUNTIME_DIR": str(runtime),
                "HOME": str(tmp_path),
                "GUNICORN_CMD_ARGS": "--config python:agentcal.gunicorn_conf",
            },
        ) as url,
        http_client(url) as client,
    ):
        assert client.get("/v1/health").status_code == 200
        left = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*.ctl"))
    assert left == []
