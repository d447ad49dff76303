"""Under the production server, agents' requests skip the middleware that exists for people (the lean
stack of agentcal/wsgi.py) and answer exactly as before: the same security headers, a Content-Length, no
session or CSRF cookie; a page through the same server still gets its policy and its cookies."""

from __future__ import annotations

import httpx

from tests.helpers import Persona, http_client


def test_an_agents_answer_keeps_its_headers_and_sets_no_cookie(sdr: Persona, app_server: str) -> None:
    with http_client(app_server, headers={"Authorization": f"Bearer {sdr.raw_key}"}) as client:
        me = client.get("/v1/me")
        made = client.post("/v1/calendars", json={"name": "Lean"})
    for answer in (me, made):
        assert answer.status_code in (200, 201), answer.text
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Referrer-Policy"] == "same-origin"
        assert answer.headers["Content-Length"] == str(len(answer.content))
        assert answer.headers["X-Request-ID"]
        assert "set-cookie" not in answer.headers and "Content-Security-Policy" not in answer.headers


def test_a_providers_callback_is_answered_without_a_csrf_token(app_server: str) -> None:
    answer = httpx.post(f"{app_server}/hooks/google", headers={"X-Goog-Channel-ID": "unknown"})
    assert answer.status_code != 403 and "set-cookie" not in answer.headers


def test_a_page_through_the_same_server_keeps_its_policy_and_cookies(app_server: str) -> None:
    page = httpx.get(f"{app_server}/auth/sign-in")
    assert page.status_code == 200
    assert "script-src" in page.headers["Content-Security-Policy"]
    assert "csrftoken=" in page.headers["set-cookie"]
    assert page.headers["Cache-Control"].startswith("max-age=0")


def test_agents_requests_go_through_the_lean_stack_and_pages_through_the_full_one() -> None:
    from agentcal import wsgi

    def view_middleware(handler: object) -> set[str]:
        return {type(method.__self__).__name__ for method in handler._view_middleware}  # type: ignore[attr-defined]

    assert "CsrfViewMiddleware" in view_middleware(wsgi.pages)
    assert "CsrfViewMiddleware" not in view_middleware(wsgi.machines)
    assert wsgi.MACHINE_PATHS == ("/v1/", "/hooks/")


def test_content_negotiation_answers_as_drf_does(sdr: Persona, app_server: str) -> None:
    """The plain cases skip parsing `Accept`; the others still get DRF's answer."""
    with http_client(app_server, headers={"Authorization": f"Bearer {sdr.raw_key}"}) as client:
        for accept in ("*/*", "application/json", "application/*", "text/html, application/json;q=0.9"):
            answer = client.get("/v1/me", headers={"Accept": accept})
            assert answer.status_code == 200, (accept, answer.text)
            assert answer.headers["Content-Type"] == "application/json"
        pretty = client.get("/v1/me", headers={"Accept": "application/json; indent=2"})
        refused = client.get("/v1/me", headers={"Accept": "text/html"})
        unknown_format = client.get("/v1/me", params={"format": "xml"})
    assert pretty.status_code == 200 and pretty.text.startswith("{\n  ")
    assert pretty.json() == answer.json()
    assert refused.status_code == 406 and refused.json()["error"] == "not_acceptable"
    assert unknown_format.status_code == 404  # DRF's answer to a format no renderer has
