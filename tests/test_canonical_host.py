"""Pages asked for under another name of this server (127.0.0.1 for localhost) go to DASHBOARD_BASE_URL,
where passkeys work; the agent API, providers' hooks and other servers are never redirected."""

from __future__ import annotations

import pytest
from django.test import Client

from agentcal.cli import startup_banner

BASE = "http://localhost:8000"


@pytest.fixture
def canonical(settings):
    settings.DASHBOARD_BASE_URL = BASE
    return settings


@pytest.mark.parametrize("method", ["get", "head"])
@pytest.mark.parametrize("host", ["127.0.0.1:8000", "[::1]:8000"])
def test_a_page_on_another_name_of_the_server_redirects_to_the_same_page_at_the_base_url(
    canonical, db, method, host
):
    response = getattr(Client(), method)("/auth/sign-in?next=/w/acme/team", HTTP_HOST=host)

    assert response.status_code == 302
    assert response["Location"] == f"{BASE}/auth/sign-in?next=/w/acme/team"


def test_pages_on_the_base_url_itself_are_served(canonical, db):
    assert Client().get("/auth/sign-in", HTTP_HOST="localhost:8000").status_code == 200


@pytest.mark.parametrize("path", ["/v1/health", "/hooks/google", "/metrics", "/static/dashboard/app.css"])
def test_the_api_hooks_metrics_and_static_files_answer_on_any_name(canonical, db, path):
    response = Client().get(path, HTTP_HOST="127.0.0.1:8000")

    assert response.status_code != 302 and "Location" not in response, path


def test_a_form_post_on_another_name_is_not_redirected(canonical, db):
    # A redirected POST would lose its body; the CSRF check answers it where it arrived.
    response = Client().post("/auth/magic-link", {"email": "a@b.test"}, HTTP_HOST="127.0.0.1:8000")

    assert response.status_code != 302


def test_the_same_name_on_another_port_is_another_server_and_is_left_alone(canonical, db):
    assert Client().get("/auth/sign-in", HTTP_HOST="127.0.0.1:9000").status_code == 200


def test_agentcal_run_prints_the_address_passkeys_work_on(canonical):
    banner = startup_banner("127.0.0.1:8000")

    assert banner.splitlines()[0].startswith(f"AgentCal is up: {BASE}/ ")
    assert "http://127.0.0.1" not in banner.splitlines()[0]
