"""Creating and editing calendars in the dashboard: owners and admins, with the agent API's own rules
(bounds and time zones from its CalendarInput), audited with the person's email."""

from __future__ import annotations

import re

import pytest

from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.models import Calendar
from tests.dashboard.pages_helpers import make_calendar, signed_in, text


@pytest.fixture
def calendar(team):
    return make_calendar(team.workspace, "Sales team", timezone="Europe/Berlin", hold_ttl_seconds=60)


def settings_url(calendar) -> str:
    return f"/w/acme/calendars/{calendar.public_id}/settings"


def field_error(html: str, name: str) -> str:
    match = re.search(rf'id="c-{name}-error">([^<]*)<', html)
    return match.group(1) if match else ""


NEW = {
    "name": "Support rota",
    "timezone": "America/New_York",
    "slot_minutes": "15",
    "hold_ttl_seconds": "120",
    "bump_window_seconds": "0",
    "max_booking_minutes": "60",
}


def test_an_owner_creates_a_calendar_from_the_list(team):
    owner = signed_in(team.owner)
    page = text(owner.get("/w/acme/calendars"))
    assert 'data-testid="calendar-create"' in page and 'action="/w/acme/calendars"' in page

    response = owner.post("/w/acme/calendars", NEW)

    created = Calendar.objects.get(workspace=team.workspace, name="Support rota")
    assert response.status_code == 302 and response["Location"] == f"/w/acme/calendars/{created.public_id}"
    assert (created.timezone, created.slot_minutes, created.hold_ttl_seconds) == ("America/New_York", 15, 120)
    assert (created.bump_window_seconds, created.max_booking_minutes) == (0, 60)
    audit = AuditRecord.objects.get(event_type=AuditEvent.CALENDAR_CREATED)
    assert (audit.actor_user, audit.agent_public_id, audit.calendar_public_id) == (
        "olivia@acme.test",
        "",
        created.public_id,
    )
    assert audit.details["timezone"] == "America/New_York" and audit.details["name"] == "Support rota"
    assert f"Calendar Support rota created. Agents book it as {created.public_id}." in text(
        owner.get(response["Location"])
    )


def test_numbers_left_blank_take_the_defaults(team):
    response = signed_in(team.admin).post(
        "/w/acme/calendars", {"name": "Lab", "timezone": "UTC", "slot_minutes": "", "hold_ttl_seconds": ""}
    )
    assert response.status_code == 302
    created = Calendar.objects.get(name="Lab")
    defaults = Calendar()
    assert (created.slot_minutes, created.hold_ttl_seconds, created.bump_window_seconds) == (
        defaults.slot_minutes,
        defaults.hold_ttl_seconds,
        defaults.bump_window_seconds,
    )


def test_bad_input_is_refused_field_by_field_with_the_apis_rules_and_kept_in_the_form(team):
    bad = {
        "name": "  ",
        "timezone": "Mars/Olympus_Mons",
        "slot_minutes": "0",
        "hold_ttl_seconds": "3601",
        "bump_window_seconds": "soon",
        "max_booking_minutes": "99999",
    }

    response = signed_in(team.owner).post("/w/acme/calendars", bad)

    assert response.status_code == 400
    html = text(response)
    assert field_error(html, "name") == "This field is required."
    assert field_error(html, "bump_window_seconds") == "Enter a whole number."
    assert not Calendar.objects.exists()

    # With the text parsed, the bounds and the time zone are the API's to judge.
    response = signed_in(team.owner).post(
        "/w/acme/calendars", {**bad, "name": "Lab", "bump_window_seconds": "5"}
    )
    html = text(response)
    assert response.status_code == 400
    assert field_error(html, "timezone") == "Unknown IANA time zone &#x27;Mars/Olympus_Mons&#x27;."
    assert field_error(html, "slot_minutes") == "Ensure this value is greater than or equal to 1."
    assert field_error(html, "hold_ttl_seconds") == "Ensure this value is less than or equal to 3600."
    assert field_error(html, "max_booking_minutes") == "Ensure this value is less than or equal to 10080."
    assert 'value="Mars/Olympus_Mons"' in html and 'value="3601"' in html and 'aria-invalid="true"' in html
    assert not Calendar.objects.exists()
    assert not AuditRecord.objects.filter(event_type=AuditEvent.CALENDAR_CREATED).exists()


def test_the_form_offers_the_apis_bounds_and_time_zones(team, calendar):
    html = text(signed_in(team.owner).get(settings_url(calendar)))
    assert re.search(r'name="hold_ttl_seconds" type="number"[^>]* min="1" max="3600"', html)
    assert re.search(r'name="bump_window_seconds" type="number"[^>]* min="0" max="86400"', html)
    assert '<option value="Europe/Berlin">' in html and 'list="c-timezones"' in html
    assert 'value="Sales team"' in html and 'value="60"' in html  # the current settings


def test_a_city_typed_without_its_region_is_the_zone_it_names(team):
    owner = signed_in(team.owner)
    response = owner.post("/w/acme/calendars", {"name": "Berlin office", "timezone": "berlin"})
    assert response.status_code == 302
    assert Calendar.objects.get(name="Berlin office").timezone == "Europe/Berlin"

    created = owner.post("/w/acme/calendars", {"name": "NY office", "timezone": "New York"})
    assert created.status_code == 302
    assert Calendar.objects.get(name="NY office").timezone == "America/New_York"

    lower = owner.post("/w/acme/calendars", {"name": "Lisbon office", "timezone": "europe/lisbon"})
    assert lower.status_code == 302
    assert Calendar.objects.get(name="Lisbon office").timezone == "Europe/Lisbon"

    # The server still judges anything else: no guessing between places or from fragments.
    for vague in ("Berl", "Europe", "Mars"):
        refused = owner.post("/w/acme/calendars", {"name": f"Vague {vague}", "timezone": vague})
        assert refused.status_code == 400
        assert "Unknown IANA time zone" in field_error(text(refused), "timezone")


def test_the_new_calendar_form_starts_from_the_browsers_zone(team):
    html = text(signed_in(team.owner).get("/w/acme/calendars"))
    picker = r'<input id="c-timezone"[^>]* data-zone-picker="c-timezones"[^>]* data-suggest-browser-zone'
    assert re.search(picker, html)
    assert 'role="listbox" aria-label="Time zones"' in html


def test_an_admin_edits_a_calendar_and_only_the_changes_are_audited(team, calendar):
    admin = signed_in(team.admin)
    form = {
        "name": "Sales EMEA",
        "timezone": "Europe/Berlin",
        "slot_minutes": str(calendar.slot_minutes),
        "hold_ttl_seconds": "300",
        "bump_window_seconds": str(calendar.bump_window_seconds),
        "max_booking_minutes": str(calendar.max_booking_minutes),
    }

    response = admin.post(settings_url(calendar), form)

    assert response.status_code == 302 and response["Location"] == f"/w/acme/calendars/{calendar.public_id}"
    calendar.refresh_from_db()
    assert (calendar.name, calendar.hold_ttl_seconds) == ("Sales EMEA", 300)
    audit = AuditRecord.objects.get(event_type=AuditEvent.CALENDAR_UPDATED)
    assert audit.actor_user == "adam@acme.test"
    assert audit.details == {"changes": {"name": "Sales EMEA", "hold_ttl_seconds": 300}}
    assert "Saved: name, hold lifetime." in text(admin.get(response["Location"]))

    unchanged = admin.post(settings_url(calendar), {**form, "hold_ttl_seconds": "300"})
    assert unchanged.status_code == 302 and "Nothing changed." in text(admin.get(unchanged["Location"]))
    assert AuditRecord.objects.filter(event_type=AuditEvent.CALENDAR_UPDATED).count() == 1


def test_a_bad_edit_changes_nothing(team, calendar):
    response = signed_in(team.owner).post(
        settings_url(calendar), {"name": "Sales team", "timezone": "Nowhere", "hold_ttl_seconds": "0"}
    )
    assert response.status_code == 400
    assert "Unknown IANA time zone" in field_error(text(response), "timezone")
    assert (
        field_error(text(response), "hold_ttl_seconds") == "Ensure this value is greater than or equal to 1."
    )
    calendar.refresh_from_db()
    assert (calendar.timezone, calendar.hold_ttl_seconds) == ("Europe/Berlin", 60)
    assert not AuditRecord.objects.filter(event_type=AuditEvent.CALENDAR_UPDATED).exists()


def test_only_owners_and_admins_create_and_edit(team, calendar):
    approver = signed_in(team.member)
    assert 'data-testid="calendar-create"' not in text(approver.get("/w/acme/calendars"))
    assert 'data-testid="calendar-settings-link"' not in text(
        approver.get(f"/w/acme/calendars/{calendar.public_id}")
    )
    assert approver.post("/w/acme/calendars", NEW).status_code == 403
    # They read the settings and rules, without a form to change them.
    read_only = approver.get(settings_url(calendar))
    assert read_only.status_code == 200 and 'data-testid="rules-read-only"' in text(read_only)
    assert "<form" not in text(read_only).split('id="content"')[1]
    assert approver.post(settings_url(calendar), {**NEW, "name": "Mine"}).status_code == 403
    assert 'data-testid="calendar-settings-link"' in text(
        signed_in(team.admin).get(f"/w/acme/calendars/{calendar.public_id}")
    )

    outsider = signed_in(team.outsider)
    assert outsider.get(settings_url(calendar)).status_code == 404
    assert outsider.post("/w/acme/calendars", NEW).status_code == 404
    calendar.refresh_from_db()
    assert calendar.name == "Sales team" and Calendar.objects.count() == 1
