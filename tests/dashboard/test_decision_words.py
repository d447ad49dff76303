"""After a decision, the flash and the approvals page's Recent list say what happened in words, and link
a booking to its day on the calendar with its drawer open."""

from __future__ import annotations

import re
from datetime import time
from html import unescape
from zoneinfo import ZoneInfo

from django.utils.html import strip_tags

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_request
from bookings.engine import hold_create
from dashboard.viewmodels.decision_words import decision_sentence
from tests.dashboard.pages_helpers import actor, future_day, make_calendar, signed_in, span_on, text


def decide(client, approval, decision):
    return client.post(
        f"/w/acme/approvals/{approval.public_id}/decide",
        {"decision": decision, "confirmed": "yes"},
        follow=True,
    )


def found(pattern: str, html: str) -> str:
    match = re.search(pattern, html, re.S)
    assert match, f"nothing matches {pattern}"
    return match.group(1)


def flash(html: str) -> str:
    return found(r'<div class="flash-item success">(.*?)</div>', html)


def gated_hold(team, title="Board prep"):
    berlin = make_calendar(team.workspace, "Berlin office", timezone="Europe/Berlin")
    span = span_on(future_day(), time(14, 0))
    hold = hold_create(actor=actor(team.sdr), calendar=berlin, span=span, title=title).primary
    approval = approval_request(
        actor=actor(team.sdr), summary="Book the board prep", evidence={"why": "asked"}, hold_id=hold.hold_id
    )
    return berlin, span, hold, approval


def test_approving_a_gated_hold_says_what_was_booked_and_links_its_day(team):
    berlin, span, hold, approval = gated_hold(team)
    local = span.start.astimezone(ZoneInfo("Europe/Berlin"))

    response = decide(signed_in(team.owner), approval, "approve")

    message = flash(text(response))
    words = " ".join(strip_tags(unescape(message)).split())
    when = f"{local:%a} {local.day} {local:%b %H:%M} {local.tzname()}"  # CET or CEST, named
    assert words == f"Booked Board prep on Berlin office, {when} — see it on the calendar"
    assert "<em>Board prep</em>" in message and "bk_" not in words
    link = unescape(found(r'<a href="([^"]+)" data-testid="decision-link">', message))
    assert link == (
        f"/w/acme/calendars/{berlin.public_id}?view=day&date={local.date().isoformat()}#{hold.hold_id}"
    )
    # The Recent list says the same, with the same link.
    recent = found(r'data-testid="recent-decision">(.*?)</div>', text(response))
    assert recent == message
    assert signed_in(team.owner).get(link.split("#")[0]).status_code == 200


def test_a_denial_says_so_in_words(team):
    _, _, _, approval = gated_hold(team)
    response = decide(signed_in(team.owner), approval, "deny")
    words = " ".join(strip_tags(unescape(flash(text(response)))).split())
    assert words == "Denied Book the board prep — nothing was booked on Berlin office; the agent is told."
    assert "Denied <em>Book the board prep</em>" in text(response)


def test_an_approval_that_could_no_longer_book_says_why(team):
    # Approval outcomes the engine reaches by races (the hold taken over or run out as the person decides).
    approval = Approval(
        workspace=team.workspace,
        summary="Book it",
        status=ApprovalStatus.APPROVED,
        hold_id="hld_gone",
        booking_error="hold_evicted",
    )
    words = strip_tags(str(decision_sentence(team.workspace, approval, None)))
    assert words.startswith("Approved Book it, but nothing was booked: the time slot had been taken over")
