"""The dashboard's security headers: a Content-Security-Policy that refuses inline script and inline
style, no-store on everything a signed-in person (or someone signing in) sees, HSTS over https only. The
policy holds only while no template needs inline script or style, so the templates are scanned too."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.template.utils import get_app_template_dirs
from django.test import Client

from tests.dashboard.pages_helpers import make_calendar, signed_in

ONE_YEAR = 365 * 86400


def directives(policy: str) -> dict[str, list[str]]:
    parsed = {}
    for directive in policy.split(";"):
        name, *sources = directive.split()
        parsed[name.lower()] = sources
    return parsed


def assert_refuses_inline_script_and_style(policy: str) -> None:
    policy_directives = directives(policy)
    script_sources = policy_directives.get("script-src", policy_directives["default-src"])
    assert script_sources == ["'self'"], policy  # no 'unsafe-inline', 'unsafe-eval', hosts or schemes
    style_element_sources = policy_directives.get(
        "style-src-elem", policy_directives.get("style-src", policy_directives["default-src"])
    )
    assert "'unsafe-inline'" not in style_element_sources, policy
    style_attribute_sources = policy_directives.get(
        "style-src-attr", policy_directives.get("style-src", policy_directives["default-src"])
    )
    assert "'unsafe-inline'" not in style_attribute_sources, policy
    assert policy_directives["object-src"] == ["'none'"] and policy_directives["frame-ancestors"] == [
        "'none'"
    ]


def test_every_html_page_has_a_policy_that_refuses_inline_script_and_style(team):
    calendar = make_calendar(team.workspace)
    anonymous = Client()
    member = signed_in(team.member)
    responses = [
        anonymous.get("/auth/sign-in"),
        anonymous.get("/auth/magic/not-a-real-token"),
        anonymous.get("/w/acme/nowhere"),  # the HTML 404 page
        member.get("/w/acme/approvals"),
        member.get("/w/acme/approvals", HTTP_HX_REQUEST="true"),  # htmx partials too
        member.get("/w/acme/calendars"),
        member.get(f"/w/acme/calendars/{calendar.public_id}"),  # the timeline, once the reason for style=""
        member.get("/auth/passkeys"),
    ]
    for response in responses:
        assert response["Content-Type"].startswith("text/html")
        assert_refuses_inline_script_and_style(response["Content-Security-Policy"])


def test_a_signed_in_persons_pages_are_never_stored(team):
    member = signed_in(team.member)
    for response in (
        member.get("/"),  # a redirect to the workspace
        member.get("/w/acme/approvals"),
        member.get("/w/acme/approvals", HTTP_HX_REQUEST="true"),
        member.get("/w/acme/audit"),
        member.get("/w/acme/agents"),
        member.get("/auth/passkeys"),
    ):
        assert "no-store" in response["Cache-Control"], response.request["PATH_INFO"]


def test_the_sign_in_and_magic_link_pages_are_never_stored(db):
    anonymous = Client()
    for response in (
        anonymous.get("/auth/sign-in"),
        anonymous.post("/auth/magic-link", {"email": "nobody@acme.test"}),
        anonymous.get("/auth/magic/not-a-real-token"),  # its URL is the one-time token (404: no such link)
        anonymous.post("/auth/passkeys/authenticate/options"),  # a WebAuthn challenge
    ):
        assert response.status_code in (200, 404)
        assert "no-store" in response["Cache-Control"], response.request["PATH_INFO"]


def test_static_files_stay_cacheable_for_signed_in_people(team):
    response = signed_in(team.member).get("/static/dashboard/app.css")

    assert response.status_code == 200
    assert "no-store" not in response.get("Cache-Control", "")


def test_hsts_is_sent_over_https_only(db):
    client = Client()

    assert client.get("/auth/sign-in", secure=True)["Strict-Transport-Security"] == f"max-age={ONE_YEAR}"
    assert "Strict-Transport-Security" not in client.get("/auth/sign-in")


# --- The templates: the policy above holds only while they need no inline script or style ------------------

TAG = re.compile(r"<[a-zA-Z][^>]*>")
SCRIPT_OPENING = re.compile(r"<script\b[^>]*>", re.IGNORECASE)
# on...= event handlers, and htmx's hx-on attributes (htmx evals them, which the policy refuses too).
INLINE_HANDLER = re.compile(r"\s((?:data-)?hx-on[:-][^\s=]*|on[a-z]+)\s*=", re.IGNORECASE)


def project_templates() -> dict[str, str]:
    """Every template in the project (not the installed packages'), by its name as Django loads it."""
    configured_dirs = settings.TEMPLATES[0]["DIRS"]
    assert isinstance(configured_dirs, list)
    template_dirs = [Path(d) for d in configured_dirs] + [
        Path(d) for d in get_app_template_dirs("templates") if "site-packages" not in Path(d).parts
    ]
    found = {
        str(path.relative_to(template_dir)): path.read_text()
        for template_dir in template_dirs
        for path in template_dir.rglob("*.html")
    }
    assert "base.html" in found and "dashboard/calendars/calendar.html" in found
    return found


def test_no_template_has_inline_script_or_event_handlers():
    offences = []
    for name, source in project_templates().items():
        offences += [f"{name}: {tag}" for tag in SCRIPT_OPENING.findall(source) if " src=" not in tag]
        offences += [f"{name}: {tag}" for tag in TAG.findall(source) if INLINE_HANDLER.search(tag)]
        offences += [f"{name}: javascript: URL" for _ in re.findall(r"javascript:", source, re.IGNORECASE)]
    assert offences == []


def test_no_template_has_a_style_element_or_style_attributes():
    # The calendar timeline's computed geometry goes in data-* attributes, applied by app.js.
    offences = []
    for name, source in project_templates().items():
        offences += [f"{name}: <style>" for _ in re.findall(r"<style\b", source, re.IGNORECASE)]
        offences += [f"{name}: {tag}" for tag in TAG.findall(source) if re.search(r"\sstyle\s*=", tag)]
    assert offences == []
