"""Real headless Chromium (Debian's package) driven by Playwright, with a CDP virtual authenticator."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Flags that keep Chromium quiet on a machine with no internet (see ../shared/testing-notes.md).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="session")
def chromium_context_factory() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need Chromium at {CHROMIUM} (apt-get install chromium); skipped here")
    playwright_sync = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API keeps an event loop running in this thread, which makes Django refuse
    # database calls from the test body; they are ordinary blocking calls, so allow them here only.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with playwright_sync.sync_playwright() as playwright:
        profiles: list[str] = []

        def new_context() -> Any:
            profile = tempfile.mkdtemp(prefix="agentcal-chromium-")
            profiles.append(profile)
            return playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1360, "height": 860},
            )

        yield new_context
        for profile in profiles:
            shutil.rmtree(profile, ignore_errors=True)
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def dashboard_settings(live_server: Any, settings: Any) -> Any:
    # Browse http://localhost:PORT: an IP address is not a valid WebAuthn relying-party id.
    settings.DASHBOARD_BASE_URL = live_server.url.replace("127.0.0.1", "localhost")
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.CSRF_TRUSTED_ORIGINS = [settings.DASHBOARD_BASE_URL]
    return settings


@pytest.fixture
def browser_page(chromium_context_factory: Any) -> Iterator[Any]:
    context = chromium_context_factory()
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


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
