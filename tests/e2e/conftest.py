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

        def new_context(**options: Any) -> Any:
            """`options`: more of Playwright's context options, e.g. `timezone_id="Asia/Kolkata"`."""
            profile = tempfile.mkdtemp(prefix="agentcal-chromium-")
            profiles.append(profile)
            return playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1360, "height": 860},
                **options,
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
    # Generous: CI runs four test processes, a live server and Chromium on two cores, and a passkey's
    # registration (the virtual authenticator, the server's verification, the page's swap) once took
    # longer than 15 s there. A passing step is not slowed by it.
    page.set_default_timeout(30_000)
    yield page
    context.close()
