"""Helpers for the browser tests: a virtual passkey authenticator, CSP refusals, screenshots, a signed-in
owner of a workspace with one agent."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership
from accounts.roles import Role
from workspaces.models import Agent, Workspace

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 860}

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


def add_passkey(page: Any, name: str) -> None:
    """On the passkeys page: a passkey of this name added through the page's own ceremony. Waits for its
    row, or fails at once with what the page said went wrong."""
    page.get_by_placeholder(re.compile("Name")).fill(name)
    page.get_by_role("button", name="Add a passkey").click()
    error = page.locator("[data-passkey-error]")
    page.locator('[data-testid="passkey-row"], [data-passkey-error]:not([hidden])').first.wait_for()
    assert error.is_hidden(), f"the passkey was not added: {error.inner_text()}"


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
    """The session of a signed-in person, made by Django and handed to the page's browser (passkey sign-in
    has its own browser tests: the owner, team and quickstart-address journeys)."""
    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base}])


def open_context(chromium_context_factory: Any, viewport: dict[str, int]) -> tuple[Any, Any, list[str]]:
    """A fresh browser at this size, and a list that collects every failed request, script error and
    Content-Security-Policy refusal."""
    context = chromium_context_factory()
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(10_000)
    page.set_viewport_size(viewport)
    failures = watch_csp_violations(page)
    page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("pageerror", lambda error: failures.append(f"script error on {page.url}: {error}"))
    return context, page, failures


# The page's width, and where it sticks out: the innermost elements past the window's right edge (those
# that make it wide, even when they escape a scrolling box, as absolutely positioned text can).
OVERFLOW_JS = """() => {
  const width = window.innerWidth, scroll = document.documentElement.scrollWidth;
  if (scroll <= width) return "";
  const past = (el) => el.getBoundingClientRect().right > width + 1;
  const name = (el) =>
    el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + [...el.classList].map((c) => "." + c).join("");
  const culprits = [...document.querySelectorAll("body *")]
    .filter((el) => past(el) && ![...el.children].some(past))
    .slice(0, 6)
    .map((el) => `${name(el)} (right edge ${Math.round(el.getBoundingClientRect().right)} px)`);
  return `${scroll} px wide in a ${width} px window: ${culprits.join(", ")}`;
}"""


def overflow(page: Any) -> str:
    """Empty if the page does not scroll sideways; otherwise its width and the elements sticking out."""
    result: str = page.evaluate(OVERFLOW_JS)
    return result
