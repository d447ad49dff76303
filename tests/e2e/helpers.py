"""Helpers for the browser tests: a virtual passkey authenticator, CSP refusals, screenshots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
