"""A sign-in link's token never reaches the access log: the link stays usable until its button is pressed,
and a mail scanner opening it first must not leave a live token behind for whoever reads the log. Tested on
the production server, gunicorn with the configuration `agentcal run` and the production command load."""

from __future__ import annotations

from pathlib import Path

import pytest

from accounts.links import magic_link_issue
from tests.accounts.helpers import make_person
from tests.helpers import http_client
from tests.helpers import test_database_url as database_url_for_children

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_sign_in_links_token_is_left_out_of_the_access_log(tmp_path: Path) -> None:
    from bench.server import GunicornServer

    owner = make_person("owner@acme.test")
    token = magic_link_issue(email=owner.email)
    access_log = tmp_path / "access.log"
    with (
        GunicornServer(
            "agentcal.wsgi:application",
            workers=1,
            health_path="/v1/health",
            env={
                "DATABASE_URL": database_url_for_children(),
                "GUNICORN_CMD_ARGS": f"--config python:agentcal.gunicorn_conf --access-logfile {access_log}",
            },
        ) as url,
        http_client(url) as client,
    ):
        link = f"{url}/auth/magic/{token}"
        opened = client.get(f"/auth/magic/{token}", headers={"Referer": link})

    assert opened.status_code == 200 and "Sign in" in opened.text  # the link still works
    lines = [line for line in access_log.read_text().splitlines() if "/auth/magic/" in line]
    assert len(lines) == 1 and token not in lines[0]
    assert '"GET /auth/magic/[redacted] HTTP/1.1" 200' in lines[0]
    assert f'"{url}/auth/magic/[redacted]"' in lines[0]  # the referrer too
