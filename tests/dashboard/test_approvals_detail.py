"""One approval's page: evidence readable in the agent's order, a gated hold's booking, an email draft's
preview, the live parts (pending count, decision), and deciding in two steps."""

from __future__ import annotations

import json
import re
from datetime import time
from html import unescape
from zoneinfo import ZoneInfo

import pytest
from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.utils.html import escape

from accounts.models import Membership, Role
from approvals.models import Approval
from approvals.services import approval_decide, approval_request
from bookings import engine
from bookings.models import BusyBlock
from dashboard.links import reservation_url
from inboxes.composing import message_send
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    signed_in,
    span_on,
    text,
)
from workspaces.models import Agent, Workspace


def ask(agent, summary="Send the proposal to Dana", evidence=None, **fields):
    return approval_request(
        actor=actor(agent),
        summary=summary,
        evidence=evidence if evidence is not None else {"why": "asked"},
        **fields,
    )


def page(client, approval) -> str:
    response = client.get(f"/w/acme/approvals/{approval.public_id}")
    assert response.status_code == 200
    return text(response)


def gated(team, *, timezone="Europe/Berlin", title="Intro call with Dana", attendees=None):
    calendar = make_calendar(team.workspace, "Sales team", timezone=timezone, bump_window_seconds=120)
    span = span_on(future_day(3), time(13, 0), minutes=45)
    hold = engine.hold_create(
        actor=actor(team.sdr),
        calendar=calendar,
        span=span,
        title=title,
        attendees=attendees
        if attendees is not None
        else ["dana@acme.test", {"name": "Bo", "email": "bo@x.test"}],
    ).primary
    approval = ask(team.sdr, "Book the intro with Dana", {"why": "she asked"}, hold_id=hold.hold_id)
    return calendar, span, hold, approval


# --- Evidence -----------------------------------------------------------------------------------------------


def test_evidence_keeps_the_agents_key_order_on_the_page_in_the_raw_json_and_in_the_api(team):
    evidence = {"zulu": 1, "subject": "Renewal", "a": 2, "message": "long key last"}
    approval = ask(team.sdr, evidence=evidence)
    approval.refresh_from_db()
    assert list(approval.evidence) != list(evidence)  # jsonb sorts keys: the reason for evidence_json
    assert list(approval.evidence_in_order) == ["zulu", "subject", "a", "message"]

    html = page(signed_in(team.owner), approval)
    tree = html[html.index('data-testid="evidence"') :]
    positions = [tree.index(f"<dt>{key}</dt>") for key in evidence]
    assert positions == sorted(positions)
    raw = html[html.index('id="evidence-raw"') :]
    assert [raw.index(f"&quot;{key}&quot;") for key in evidence] == sorted(
        raw.index(f"&quot;{key}&quot;") for key in evidence
    )

    from approvals.api import approval_payload

    assert list(approval_payload(approval)["evidence"]) == list(evidence)


def test_the_ordered_copy_cannot_disagree_with_the_evidence(team):
    approval = ask(team.sdr, evidence={"b": 1, "a": 2})
    with pytest.raises(IntegrityError), transaction.atomic():
        Approval.objects.filter(pk=approval.pk).update(evidence_json=json.dumps({"b": 1, "a": 3}))


def test_nested_values_render_as_nested_lists_with_plain_words_for_literals(team):
    approval = ask(
        team.sdr,
        evidence={
            "thread": [{"from": "Dana", "said": "Tuesday works"}, {"from": "Bo", "said": "Me too"}],
            "checks": {"calendar_free": True, "budget_ok": False, "notes": None, "score": 0.92},
            "tags": [],
        },
    )
    html = page(signed_in(team.owner), approval)
    tree = html[html.index('data-testid="evidence"') : html.index("Raw JSON")]
    # thread → a list of objects, each a term/value list
    assert re.search(r'<dt>thread</dt><dd><ul class="ev-list"><li><dl class="ev-object">', tree)
    assert '<dt>said</dt><dd><span class="ev-str">Tuesday works</span>' in tree
    assert '<dt>calendar_free</dt><dd><span class="ev-lit" title="true">yes</span>' in tree
    assert '<dt>budget_ok</dt><dd><span class="ev-lit" title="false">no</span>' in tree
    assert '<dt>notes</dt><dd><span class="ev-lit" title="null: no value">—</span>' in tree
    assert '<span class="ev-num">0.92</span>' in tree
    assert '<dt>tags</dt><dd><span class="ev-empty">(none)</span>' in tree


def test_long_text_is_folded_and_deep_or_long_structures_defer_to_the_raw_json(team):
    story = "Dana wrote back. " * 40
    deep: dict = {"level": "bottom"}
    for _ in range(12):
        deep = {"down": deep}
    approval = ask(team.sdr, evidence={"story": story, "deep": deep, "many": list(range(150))})
    html = page(signed_in(team.owner), approval)
    assert '<details class="ev-long"><summary><span class="ev-preview">Dana wrote back. Dana' in html
    assert f"show all {len(story):,} characters" in html
    assert html.count('<code class="ev-raw"') == 1  # the nesting beyond eight levels
    assert "… and 50 more (see the raw JSON)" in html


def test_evidence_and_state_are_escaped_everywhere(team):
    approval = ask(
        team.sdr,
        evidence={"<b>key</b>": "<script>alert(1)</script>", "list": ["<img src=x onerror=alert(2)>"]},
        state={"next": "<script>alert(3)</script>"},
    )
    html = page(signed_in(team.owner), approval)
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>key</b>" not in html
    assert "<dt>&lt;b&gt;key&lt;/b&gt;</dt>" in html
    assert '<span class="ev-str">&lt;script&gt;alert(1)&lt;/script&gt;</span>' in html
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in html  # the agent's own notes, raw


# --- A review-first email draft -----------------------------------------------------------------------------


def test_a_review_first_draft_shows_as_the_email_it_sends_with_its_html_sanitized(team):
    team.sdr.inbox_review_first = True
    team.sdr.save(update_fields=["inbox_review_first"])
    message = message_send(
        agent=team.sdr,
        to=["ana@example.com"],
        cc=["bo@example.org"],
        subject="Proposal for <Acme>",
        text="Terms attached.",
        html='<p onclick="steal()">Hi <b>Ana</b></p><script>alert(1)</script>'
        '<img src="https://tracker.example/p.gif" alt="pixel"><a href="javascript:alert(2)">x</a>',
    )
    approval = Approval.objects.get(public_id=message.approval_id)
    html = page(signed_in(team.member), approval)

    assert "The email approving sends" in html and 'data-testid="draft-not-linked"' not in html
    assert '<dd data-testid="draft-to">ana@example.com</dd>' in html
    assert "<strong>Proposal for &lt;Acme&gt;</strong>" in html
    preview = html[html.index('data-testid="draft-html"') :]
    preview = preview[: preview.index("</div>")]
    assert "<b>Ana</b>" in preview
    for unsafe in ("onclick", "<script", "tracker.example", "javascript:"):
        assert unsafe not in preview
    assert "Plain-text version" in html
    # The raw draft, as evidence, is there too (escaped), one click away.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # An approver decides on the draft but does not read the agent's inbox: no link to the thread.
    assert "/inbox/" not in html
    assert "/inbox/" in page(signed_in(team.owner), approval)


def test_evidence_shaped_like_a_draft_without_one_says_approving_sends_nothing(team):
    approval = ask(
        team.sdr,
        "Send email: fake",
        {"message": "msg_made_up", "to": ["x@example.com"], "subject": "Hello", "text": "Hi"},
    )
    html = page(signed_in(team.owner), approval)
    assert 'data-testid="draft-not-linked"' in html and "approving sends nothing by itself" in html


# --- A gated hold's booking ---------------------------------------------------------------------------------


def test_a_gated_approval_shows_the_booking_it_would_make_and_links_to_the_calendar_day(team):
    calendar, span, hold, approval = gated(team)
    html = page(signed_in(team.owner), approval)

    berlin = span.start.astimezone(ZoneInfo("Europe/Berlin"))
    # The calendar's own stable link to the hold: its day, the hold's drawer open.
    link = reservation_url(team.workspace, hold)
    assert f"date={berlin.date().isoformat()}" in link and link.endswith(f"#{hold.hold_id}")
    assert f'href="{escape(link)}" data-testid="booking-calendar"' in html
    assert f"{berlin:%a} {berlin.day} {berlin:%b %Y, %H:%M}" in html
    assert "(Europe/Berlin, 45 min)" in html
    assert f"{span.start:%H:%M}–{span.end:%H:%M} UTC" in html
    assert '<dd data-testid="booking-title">Intro call with Dana</dd>' in html
    assert "<li>dana@acme.test</li>" in html and "<li>Bo &lt;bo@x.test&gt;</li>" in html
    assert 'SDR bot, at <a class="term" href="#term-priority"' in html
    assert '<span data-testid="booking-priority">100</span>' in html
    assert "Held for this approval" in html and 'data-testid="booking-problems"' not in html
    assert 'id="term-priority"' in html and 'id="term-fencing_token"' in html  # the glossary


def test_a_gated_approval_whose_hold_was_taken_over_says_who_took_it(team):
    calendar, span, hold, approval = gated(team)
    engine.hold_create(actor=actor(team.exec_assistant), calendar=calendar, span=span)
    html = page(signed_in(team.owner), approval)
    problems = html[html.index('data-testid="booking-problems"') :]
    assert "Taken over by Exec assistant, priority 500 (higher than this hold&#x27;s 100)" in problems
    assert "Approving now cannot make this booking" in problems


def test_a_gated_approval_names_busy_time_in_the_owners_own_calendar_over_it(team):
    calendar, span, hold, approval = gated(team)
    BusyBlock.objects.create(
        calendar=calendar,
        source="google",
        connection_id=1,
        event_key="evt1",
        start_time=span.start,
        end_time=span.end,
    )
    html = page(signed_in(team.owner), approval)
    assert "The owner&#x27;s own calendar (Google) is busy" in html


def test_the_queue_says_which_calendar_and_time_a_gated_approval_books(team):
    calendar, span, hold, approval = gated(team)
    html = text(signed_in(team.owner).get("/w/acme/approvals"))
    berlin = span.start.astimezone(ZoneInfo("Europe/Berlin"))
    assert f"Books Sales team · {berlin:%a} {berlin.day} {berlin:%b %Y, %H:%M}" in html
    assert "(Europe/Berlin)" in html


# --- Deciding in two steps ----------------------------------------------------------------------------------


def decide_url(approval) -> str:
    return f"/w/acme/approvals/{approval.public_id}/decide"


def test_approving_asks_to_confirm_first_and_says_what_will_happen(team):
    calendar, span, hold, approval = gated(team)
    client = signed_in(team.member)
    step = client.post(decide_url(approval), {"decision": "approve", "note": "Go ahead"})
    assert step.status_code == 200
    html = text(step)
    assert 'data-testid="confirm-step"' in html and "Approve this request?" in html
    assert 'The <a class="term" href="#term-hold"' in html and "becomes a booking on Sales team" in html
    assert "For 2 minutes after that" in html  # the calendar's bump window, in words
    assert ">Go ahead</textarea>" in html
    approval.refresh_from_db()
    assert approval.status == "pending"

    done = client.post(decide_url(approval), {"decision": "approve", "note": "Go ahead", "confirmed": "yes"})
    assert done.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_email, approval.note) == (
        "approved",
        "mo@acme.test",
        "Go ahead",
    )
    assert approval.booking_id


def test_approving_for_a_paused_agent_says_the_pause_does_not_stop_it(team):
    calendar, span, hold, approval = gated(team)
    client = signed_in(team.member)
    step = text(client.post(decide_url(approval), {"decision": "approve"}))
    assert 'data-testid="paused-note"' not in step

    Agent.objects.filter(pk=team.sdr.pk).update(paused_at=Now())
    step = text(client.post(decide_url(approval), {"decision": "approve"}))
    assert (
        "SDR bot is paused: approving still does this, as the pause stops only the agents' own writes."
        in (unescape(step))
    )

    Workspace.objects.filter(pk=team.workspace.pk).update(paused_at=Now())
    step = text(client.post(decide_url(approval), {"decision": "approve"}))
    assert "Every agent is paused: approving still does this" in unescape(step)


def test_back_returns_to_the_choice_keeping_the_note(team):
    approval = ask(team.sdr)
    html = text(
        signed_in(team.owner).post(decide_url(approval), {"decision": "deny", "note": "Hmm", "back": "1"})
    )
    assert 'data-testid="confirm-step"' not in html and 'data-testid="approve"' in html
    assert ">Hmm</textarea>" in html
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_a_viewer_sees_no_decide_form_and_cannot_decide(team, django_user_model):
    viewer = django_user_model.objects.create_user(username="vi@acme.test", email="vi@acme.test")
    Membership.objects.create(user=viewer, workspace=team.workspace, role=Role.VIEWER)
    approval = ask(team.sdr)
    client = signed_in(viewer)
    html = page(client, approval)
    assert 'data-testid="read-only"' in html and 'data-testid="approve"' not in html
    response = client.post(decide_url(approval), {"decision": "approve", "confirmed": "yes"})
    assert response.status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_a_note_postgresql_cannot_store_is_refused_and_kept_for_editing(team):
    approval = ask(team.sdr)
    sent = {"decision": "deny", "note": "No\x00 thanks", "confirmed": "yes"}
    response = signed_in(team.owner).post(decide_url(approval), sent)
    assert response.status_code == 200
    html = text(response)
    assert "The note holds a character that cannot be saved" in html
    assert ">No\ufffd thanks</textarea>" in html
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_an_overlong_note_is_refused_and_kept_for_editing(team):
    approval = ask(team.sdr)
    note = "x" * 2001
    html = text(signed_in(team.owner).post(decide_url(approval), {"decision": "approve", "note": note}))
    assert "The note may be at most 2000 characters (it has 2001)." in html
    assert f">{note}</textarea>" in html


# --- Live parts ---------------------------------------------------------------------------------------------


def test_the_pending_count_endpoint_answers_204_while_unchanged_and_the_badge_otherwise(team):
    ask(team.sdr, "One")
    client = signed_in(team.member)
    url = "/w/acme/approvals/pending-count"
    assert client.get(url, {"shown": "1"}, HTTP_HX_REQUEST="true").status_code == 204
    ask(team.sdr, "Two")
    badge = client.get(url, {"shown": "1"}, HTTP_HX_REQUEST="true")
    assert badge.status_code == 200 and "no-cache" in badge["Cache-Control"]
    assert 'data-pending-count="2"' in text(badge) and "shown=2" in text(badge)
    assert signed_in(team.outsider).get(url).status_code == 404


def test_every_page_carries_the_count_in_the_badge_and_the_tab_title(team):
    ask(team.sdr, "One")
    ask(team.sdr, "Two")
    html = text(signed_in(team.owner).get("/w/acme/calendars"))
    assert "<title>(2) " in html
    assert re.search(r'id="pending-badge"[^>]*data-pending-count="2"', html)


def test_the_open_page_hears_of_another_persons_decision_and_only_then(team):
    calendar, span, hold, approval = gated(team)
    client = signed_in(team.owner)
    html = page(client, approval)
    found = re.search(r'id="approval-poll" hidden hx-get="([^"]+)"', html)
    assert found is not None
    poll = found.group(1).replace("&amp;", "&")
    assert client.get(poll, HTTP_HX_REQUEST="true").status_code == 204

    approval_decide(approval_id=approval.public_id, workspace=team.workspace, user=team.admin, approve=True)
    update = client.get(poll, HTTP_HX_REQUEST="true")
    assert update.status_code == 200
    live = text(update)
    assert "<strong>Approved</strong> by adam@acme.test at" in live
    assert 'id="decision" hx-swap-oob="innerHTML"' in live and 'data-testid="approve"' not in live
    assert 'id="pending-badge"' in live and 'data-pending-count="0"' in live
    assert 'id="booking" hx-swap-oob="innerHTML"' in live and "Booked (bk_" in live
    # Decided and booked: nothing more will change, so the poll stops.
    assert '<div id="approval-poll" hidden></div>' in live
