"""Helpers for the browser tests: a virtual passkey authenticator, CSP refusals, screenshots, a signed-in
owner of a workspace with one agent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership
from accounts.roles import Role
from workspaces.models import Agent, Workspace

# SCREENSHOT_DIR sends one run's screenshots elsewhere (to look at them side by side with another branch's).
ARTIFACTS = Path(os.environ.get("SCREENSHOT_DIR") or Path(__file__).resolve().parents[2] / "test-artifacts")


def add_virtual_authenticator(page: Any) -> tuple[Any, str]:
    """A platform passkey authenticator that verifies the user (like Touch ID), via the DevTools protocol."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    result = cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return cdp, result["authenticatorId"]


def watch_csp_violations(page: Any) -> list[str]:
    """Every Content-Security-Policy refusal on this page from now on, across navigations.

    Two witnesses, so a quiet list means a clean journey rather than a deaf listener: Chromium's console
    line for each refusal, and the document's `securitypolicyviolation` events, reported through a
    Playwright binding (bindings and init scripts come from DevTools, which the policy does not govern).
    """
    violations: list[str] = []

    def on_console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            violations.append(f"console at {page.url}: {message.text}")

    page.on("console", on_console)
    page.expose_binding("reportCspViolation", lambda source, report: violations.append(f"event: {report}"))
    page.add_init_script(
        """document.addEventListener("securitypolicyviolation", (e) =>
             window.reportCspViolation(`${e.violatedDirective} refused ${e.blockedURI || "inline"}`
                                       + ` in ${e.sourceFile || document.URL}:${e.lineNumber}`));"""
    )
    return violations


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def acme_owner_and_agent() -> tuple[Workspace, Any, Agent]:
    """Workspace acme, its owner olivia@acme.test and its agent "SDR bot" (priority 100)."""
    workspace = Workspace.objects.create(slug="acme", name="Acme")
    owner = get_user_model().objects.create_user(username="olivia@acme.test", email="olivia@acme.test")
    Membership.objects.create(user=owner, workspace=workspace, role=Role.OWNER)
    agent = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=100
    )
    return workspace, owner, agent


def sign_in(page: Any, user: Any, base: str) -> None:
    """The session of a signed-in person (passkey sign-in has its own browser test: the owner journey)."""
    client = Client()
    client.force_login(user)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}])
