"""The audit trail in words: every event has a name people read, rows are sentences, the filter groups
events by family under readable names, and one record shows its facts with the raw JSON behind a toggle."""

from __future__ import annotations

import re
from datetime import time
from zoneinfo import ZoneInfo

from django.utils.html import strip_tags

from audit.events import AuditEvent
from audit.models import AuditRecord, Outcome
from audit.services import audit_record
from bookings.engine import booking_cancel_by_person, booking_create, hold_create
from dashboard.wording import EVENT_GROUPS, EVENT_NAMES, AuditParts, audit_sentence, event_name
from tests.dashboard.pages_helpers import actor, future_day, make_calendar, signed_in, span_on, text
from workspaces.actor import Actor

AUDIT = "/w/acme/audit"


def sentences(html: str) -> list[str]:
    found = re.findall(r'data-testid="audit-sentence">(.*?)</span>\s*<span class="hint', html, re.S)
    return [" ".join(strip_tags(s).split()) for s in found]


def test_every_audit_event_has_a_readable_name_and_one_filter_group():
    grouped = [str(event) for _, _, events in EVENT_GROUPS for event in events]
    for event in AuditEvent:
        name = EVENT_NAMES.get(event)
        assert name, f"{event.value} has no readable name"
        assert "." not in name and "_" not in name and name != event.value
        assert event_name(event.value) == name
        assert grouped.count(event.value) == 1, f"{event.value} is in {grouped.count(event.value)} groups"


def test_an_event_without_a_sentence_reads_actor_dash_its_name():
    unknown = audit_sentence(AuditParts(actor="Agent sdr", event_type="calendar.thing.done"))
    assert str(unknown) == "Agent sdr — Calendar thing done"
    named = audit_sentence(AuditParts(actor="Agent sdr", event_type=AuditEvent.WEBHOOK_ENDPOINT_CREATED))
    assert str(named) == "Agent sdr — Webhook added"


def test_a_sentence_escapes_what_agents_wrote():
    sentence = audit_sentence(
        AuditParts(
            actor="Agent <b>x</b>",
            event_type=AuditEvent.BOOKING_CANCELLED,
            title="<script>alert(1)</script>",
            calendar="Berlin office",
        )
    )
    assert "<script>" not in sentence and "&lt;script&gt;" in sentence and "&lt;b&gt;" in sentence


def test_holds_bookings_cancellations_and_refusals_read_as_sentences(team):
    berlin = make_calendar(team.workspace, "Berlin office", timezone="Europe/Berlin")
    day = future_day()
    as_sdr = actor(team.sdr)
    hold_create(actor=as_sdr, calendar=berlin, span=span_on(day, time(13, 0)), title="Intro call")
    booking = booking_create(
        actor=as_sdr, calendar=berlin, span=span_on(day, time(9, 0), 60), title="Quarterly planning"
    )
    person = Actor(workspace=team.workspace, agent=None, user_email=team.owner.email)
    booking_cancel_by_person(actor=person, booking_id=booking.primary.booking_id or "")
    audit_record(
        event_type=AuditEvent.HOLD_REJECTED,
        outcome=Outcome.REJECTED,
        actor=as_sdr,
        calendar_public_id=berlin.public_id,
        http_status=409,
        failure_reason="slot_conflict",
    )

    html = text(signed_in(team.member).get(AUDIT))

    read = sentences(html)
    hold_local = span_on(day, time(13, 0)).start.astimezone(ZoneInfo("Europe/Berlin"))
    assert read[0] == "Agent SDR bot was refused a hold on Berlin office: slot taken (409)"
    assert read[1] == "olivia@acme.test cancelled Quarterly planning on Berlin office"
    assert read[2].startswith("Agent SDR bot booked Quarterly planning on Berlin office, ")
    assert read[3].startswith(f"Agent SDR bot held {hold_local:%a} {hold_local.day} {hold_local:%b %H:%M}–")
    assert read[3].endswith(" on Berlin office")
    assert "<em>Quarterly planning</em>" in html
    assert "see it on the calendar" in html  # the booking's row links to its day on the calendar
    assert not re.search(r">\s*calendar\.[a-z_.]+\s*<", html), "a dotted event code is shown to people"


def test_the_filter_groups_events_under_readable_names_with_the_codes_as_values(team):
    html = text(signed_in(team.member).get(AUDIT, {"event_type": "calendar.hold.*"}))
    select = html[html.index('<select id="f-event"') : html.index("</select>", html.index('id="f-event"'))]
    labels = re.findall(r'<optgroup label="([^"]+)">', select)
    assert labels[:2] == ["Holds", "Bookings"]
    assert {"Approvals", "Inbox", "Webhooks", "Upstream sync", "Keys and agents", "Team", "Limits"} <= set(
        labels
    )
    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', select)
    assert ("calendar.hold.created", "Hold placed") in options
    assert '<option value="calendar.hold.*" selected>Every hold event</option>' in select
    assert all("." not in label for _, label in options), [label for _, label in options if "." in label]


def test_a_record_shows_its_facts_with_ids_to_copy_and_the_raw_json_behind_a_toggle(team):
    berlin = make_calendar(team.workspace, "Berlin office")
    record: AuditRecord = audit_record(
        event_type=AuditEvent.HOLD_REJECTED,
        outcome=Outcome.REJECTED,
        actor=actor(team.sdr),
        calendar_public_id=berlin.public_id,
        failure_reason="slot_conflict",
        details={"expires_at": "2026-12-03T14:00:00Z"},
    )
    body = text(signed_in(team.member).get(AUDIT, {"record": record.public_id}, HTTP_HX_REQUEST="true"))

    assert 'data-testid="record-facts"' in body
    assert re.search(r"<dt>Calendar</dt><dd>.*?" + berlin.public_id + r".*?Berlin office", body, re.S)
    assert (
        f'data-copy-text="{team.sdr.public_id}"' in body
        and f'<span class="visually-hidden"> {team.sdr.public_id}</span>' in body
    )
    assert "3 Dec 2026, 14:00:00 UTC" in body
    assert re.search(
        r'<details class="json raw-record" data-testid="raw-json">\s*<summary>Raw JSON</summary>', body
    )


def test_a_refusal_reason_reads_in_words_and_is_not_taken_for_an_id(team):
    record = audit_record(
        event_type=AuditEvent.COMMIT_REJECTED,
        outcome=Outcome.REJECTED,
        actor=actor(team.sdr),
        http_status=409,
        failure_reason="hold_expired",
    )
    body = text(signed_in(team.member).get(AUDIT, {"record": record.public_id}, HTTP_HX_REQUEST="true"))
    assert "<strong>Rejected</strong>: the hold had run out (HTTP 409)" in body
    assert "<dt>Why refused</dt><dd>the hold had run out (hold_expired)</dd>" in body
    assert 'data-copy-text="hold_expired"' not in body
