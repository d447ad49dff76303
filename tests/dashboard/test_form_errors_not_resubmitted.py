"""A dashboard form sent back with its errors names the address of its page as a GET (base.html's
data-replace-url, which app.js puts in the address bar), so a reload opens the page instead of sending the
form again, whatever address the form posted to. The browser side: tests/e2e/test_form_reload.py."""

from __future__ import annotations

import re

from approvals.services import approval_request
from tests.dashboard.pages_helpers import actor, make_calendar, signed_in, text


def replace_url(html: str) -> str | None:
    match = re.search(r'<body[^>]*\sdata-replace-url="([^"]*)"', html)
    return match.group(1) if match else None


def test_every_form_sent_back_with_errors_names_its_get_page(team):
    calendar = make_calendar(team.workspace)
    agent = f"/w/acme/agents/{team.sdr.public_id}"
    calendar_page = f"/w/acme/calendars/{calendar.public_id}"
    refused = [
        ("/w/acme/agents", {"name": ""}, "/w/acme/agents"),
        (f"{agent}/priority", {"priority": "high"}, agent),
        (f"{agent}/name", {"name": ""}, agent),
        (f"{agent}/keys", {"name": "worker"}, agent),  # no scope chosen
        (f"{agent}/inbox-settings", {"burst_limit": "lots"}, agent),
        (f"{agent}/limits", {"live_holds": "lots"}, agent),
        ("/w/acme/start/agent", {"name": ""}, "/w/acme/start"),
        ("/w/acme/team/invitations", {"email": "not an address", "role": "admin"}, "/w/acme/team"),
        ("/w/acme/calendars", {"name": "", "timezone": "UTC"}, "/w/acme/calendars"),
        (f"{calendar_page}/settings", {"name": "", "timezone": "UTC"}, f"{calendar_page}/settings"),
        (f"{calendar_page}/connection", {"url": "not a url"}, calendar_page),
        ("/w/acme/settings/limits", {"live_holds": "lots"}, "/w/acme/settings/limits"),
        ("/w/acme/settings/mail", {"inbound_domain": "not a domain!"}, "/w/acme/settings/mail"),
    ]
    owner = signed_in(team.owner)
    for post_to, data, page in refused:
        response = owner.post(post_to, data)
        assert response.status_code == 400, (post_to, response.status_code)
        assert replace_url(text(response)) == page, post_to
        shown = owner.get(page)
        assert shown.status_code == 200, page
        assert replace_url(text(shown)) is None, page  # a GET page has nothing to replace


def test_a_no_javascript_confirm_step_names_its_page_too(team):
    approval = approval_request(actor=actor(team.sdr), summary="Send the proposal", evidence={})
    response = signed_in(team.owner).post(
        f"/w/acme/approvals/{approval.public_id}/decide", {"decision": "approve"}
    )
    assert response.status_code == 200
    assert replace_url(text(response)) == f"/w/acme/approvals/{approval.public_id}"
