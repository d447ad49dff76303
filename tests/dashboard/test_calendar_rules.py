"""The calendar rules editor on the settings page, as plain form posts (no JavaScript): weekly hours, date
overrides, buffers and notice saved through calendar_update and shown back by the agent API; problems
shown beside their day; the next week's open time; the read-only view for members who may not change."""

from __future__ import annotations

import html as html_module
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.models import Calendar
from dashboard.viewmodels.rules_preview import rules_preview
from tests.dashboard.pages_helpers import make_calendar, signed_in, text
from workspaces.keys import api_key_create


@pytest.fixture
def calendar(team):
    return make_calendar(team.workspace, "Sales team", timezone="Europe/Berlin")


def settings_url(calendar: Calendar) -> str:
    return f"/w/acme/calendars/{calendar.public_id}/settings"


def the_form(calendar: Calendar, **changes: Any) -> dict[str, Any]:
    """What the page posts for a calendar open Monday to Friday 09:00-17:00, with `changes` on top
    (a list value is a repeated field)."""
    form: dict[str, Any] = {
        "name": calendar.name,
        "timezone": calendar.timezone,
        "hours": "weekly",
        "buffer_before_minutes": "0",
        "buffer_after_minutes": "0",
        "min_notice_minutes": "0",
    }
    for day in ("mon", "tue", "wed", "thu", "fri", "sat", "sun"):
        form[f"{day}-start"], form[f"{day}-end"] = "09:00", "17:00"
        if day not in ("sat", "sun"):
            form[f"{day}-open"] = "1"
    form.update(changes)
    return form


def as_the_api_shows_it(team, calendar: Calendar) -> dict[str, Any]:
    _, raw = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    response = Client().get(f"/v1/calendars/{calendar.public_id}", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    return response.json()


def day_error(html: str, key: str) -> str:
    match = re.search(rf'data-testid="rules-error-{key}" role="alert">([^<]*)<', html)
    return html_module.unescape(match.group(1)) if match else ""


def test_an_owner_saves_hours_an_override_buffers_and_notice_and_the_api_shows_them(team, calendar):
    owner = signed_in(team.owner)
    form = the_form(
        calendar,
        **{
            "mon-start": ["13:30", "09:00"],  # out of order, as a person may add them
            "mon-end": ["00:00", "12:30"],  # 00:00 closes at midnight
            "sat-open": "1",
            "sat-start": "10:00",
            "sat-end": "14:00",
            "ov-0-date": "2026-12-24",  # closed: no "ov-0-open"
            "ov-0-start": "09:00",
            "ov-0-end": "17:00",
            "ov-4-date": "2026-12-31",
            "ov-4-open": "1",
            "ov-4-start": "10:00",
            "ov-4-end": "14:00",
            "ov-7-date": "",  # a row added and left blank
            "buffer_before_minutes": "10",
            "buffer_after_minutes": "15",
            "min_notice_minutes": "120",
        },
    )

    response = owner.post(settings_url(calendar), form)

    assert response.status_code == 302 and response["Location"] == settings_url(calendar)
    shown = as_the_api_shows_it(team, calendar)
    assert shown["working_hours"] == {
        "mon": [["09:00", "12:30"], ["13:30", "24:00"]],
        "tue": [["09:00", "17:00"]],
        "wed": [["09:00", "17:00"]],
        "thu": [["09:00", "17:00"]],
        "fri": [["09:00", "17:00"]],
        "sat": [["10:00", "14:00"]],
        "sun": [],
    }
    assert shown["date_overrides"] == {"2026-12-24": [], "2026-12-31": [["10:00", "14:00"]]}
    assert (shown["buffer_before_minutes"], shown["buffer_after_minutes"], shown["min_notice_minutes"]) == (
        10,
        15,
        120,
    )
    audit = AuditRecord.objects.get(event_type=AuditEvent.CALENDAR_UPDATED)
    assert audit.actor_user == "olivia@acme.test"
    assert set(audit.details["changes"]) == {
        "working_hours",
        "date_overrides",
        "buffer_before_minutes",
        "buffer_after_minutes",
        "min_notice_minutes",
    }
    page = text(owner.get(response["Location"]))
    assert "Saved: working hours, date overrides, buffer before, buffer after, minimum notice." in page
    # Shown back as saved: Monday's second time closes at midnight (00:00 in a time input).
    assert 'name="mon-start" value="13:30"' in page and 'name="mon-end" value="00:00"' in page
    assert 'name="ov-1-date" value="2026-12-31"' in page

    again = owner.post(settings_url(calendar), form)
    assert "Nothing changed." in text(owner.get(again["Location"]))
    assert AuditRecord.objects.filter(event_type=AuditEvent.CALENDAR_UPDATED).count() == 1


def test_open_at_any_time_stores_no_working_hours(team, calendar):
    calendar.working_hours = {"mon": [["09:00", "17:00"]]}
    calendar.save()
    response = signed_in(team.admin).post(settings_url(calendar), the_form(calendar, hours="any"))
    assert response.status_code == 302
    calendar.refresh_from_db()
    assert calendar.working_hours is None
    assert as_the_api_shows_it(team, calendar)["working_hours"] is None


@pytest.mark.parametrize(
    ("starts", "ends", "message"),
    [
        (["17:00"], ["09:00"], "Starts at 17:00, after its end 09:00."),
        (
            ["09:00", "12:00"],
            ["12:30", "14:00"],
            "12:00–14:00 overlaps 09:00–12:30: a day's times may not overlap.",
        ),
        (["09:00", "10:00"], ["", "12:00"], "Give each time a start and an end."),
    ],
)
def test_a_bad_time_is_shown_on_its_day_and_nothing_is_saved(team, calendar, starts, ends, message):
    form = the_form(calendar, **{"wed-start": starts, "wed-end": ends, "min_notice_minutes": "30"})

    response = signed_in(team.owner).post(settings_url(calendar), form)

    assert response.status_code == 400
    html = text(response)
    assert message in day_error(html, "wed")
    assert not day_error(html, "tue") and not day_error(html, "thu")
    assert 'aria-invalid="true"' in html.split('data-testid="day-wed"')[1].split('data-testid="day-thu"')[0]
    calendar.refresh_from_db()
    assert (calendar.working_hours, calendar.min_notice_minutes) == (None, 0)
    assert not AuditRecord.objects.filter(event_type=AuditEvent.CALENDAR_UPDATED).exists()


def test_an_open_day_needs_a_time_and_an_override_a_date(team, calendar):
    form = the_form(
        calendar,
        **{"thu-start": "", "thu-end": "", "ov-0-date": "", "ov-0-open": "1", "ov-0-start": "10:00"},
    )
    form["ov-0-end"] = "12:00"
    html = text(signed_in(team.owner).post(settings_url(calendar), form))
    assert day_error(html, "thu") == "Add opening times, or mark Thursday closed."
    assert day_error(html, "ov-0") == "Pick a date."
    calendar.refresh_from_db()
    assert calendar.working_hours is None


def test_without_javascript_the_buttons_add_and_remove_rows_without_saving(team, calendar):
    owner = signed_in(team.owner)
    added = owner.post(settings_url(calendar), the_form(calendar, edit="add:tue"))
    assert added.status_code == 200
    tuesday = text(added).split('data-testid="day-tue"')[1].split('data-testid="day-wed"')[0]
    assert tuesday.count('name="tue-start"') == 2

    copied = owner.post(
        settings_url(calendar),
        the_form(
            calendar, edit="copy-monday", **{"mon-start": ["08:00", "13:00"], "mon-end": ["12:00", "16:00"]}
        ),
    )
    friday = text(copied).split('data-testid="day-fri"')[1].split('data-testid="day-sat"')[0]
    assert 'name="fri-start" value="08:00"' in friday and 'name="fri-end" value="16:00"' in friday

    with_date = owner.post(settings_url(calendar), the_form(calendar, edit="add-override"))
    assert 'name="ov-0-date"' in text(with_date)
    calendar.refresh_from_db()
    assert calendar.working_hours is None
    assert not AuditRecord.objects.exists()


def test_the_preview_lists_the_next_seven_days_open_time_in_the_calendars_zone(team, calendar):
    calendar.working_hours = {
        "mon": [["09:00", "12:30"], ["13:30", "17:00"]],
        "tue": [["09:00", "17:00"]],
        "wed": [["09:00", "17:00"]],
        "thu": [["22:00", "24:00"]],
        "fri": [["00:00", "02:00"]],
    }
    calendar.date_overrides = {"2026-12-23": []}
    calendar.save()
    # 23:30 UTC on Sunday is already Monday in Berlin: the week starts on the calendar's today.
    preview = rules_preview(calendar, now=datetime(2026, 12, 20, 23, 30, tzinfo=UTC))
    assert {day.day.isoformat(): day.intervals for day in preview.days} == {
        "2026-12-21": [("09:00", "12:30"), ("13:30", "17:00")],
        "2026-12-22": [("09:00", "17:00")],
        "2026-12-23": [],  # the override closes it
        "2026-12-24": [("22:00", "24:00")],  # open across midnight, shown on each day it covers
        "2026-12-25": [("00:00", "02:00")],
        "2026-12-26": [],
        "2026-12-27": [],
    }
    assert preview.days[0].is_today and not preview.any_time and not preview.closed_all_week

    html = text(signed_in(team.member).get(settings_url(calendar)))
    assert "in <strong>Europe/Berlin</strong>" in html
    assert html.count('data-testid="preview-day"') == 7 and "09:00–17:00" in html


def test_the_preview_says_open_at_any_time_or_closed_all_week(team, calendar):
    member = signed_in(team.member)
    assert 'data-testid="preview-any-time"' in text(member.get(settings_url(calendar)))
    calendar.working_hours = {}
    calendar.save()
    assert 'data-testid="preview-closed"' in text(member.get(settings_url(calendar)))


def test_members_who_may_not_change_read_the_rules_and_cannot_post(team, calendar):
    calendar.working_hours = {"mon": [["09:00", "17:00"]]}
    calendar.min_notice_minutes = 90
    calendar.save()
    member = signed_in(team.member)
    html = text(member.get(settings_url(calendar)))
    assert 'data-testid="rules-read-only"' in html and 'name="hours"' not in html
    assert "Monday</span> 09:00–17:00" in html and "1\u00a0h 30\u00a0min" in html
    assert 'data-testid="calendar-rules-link"' in text(member.get(f"/w/acme/calendars/{calendar.public_id}"))
    assert member.post(settings_url(calendar), the_form(calendar)).status_code == 403
    calendar.refresh_from_db()
    assert calendar.working_hours == {"mon": [["09:00", "17:00"]]}


def test_a_fresh_utc_calendar_asks_the_browser_for_its_zone_and_a_set_up_one_does_not(team):
    fresh = make_calendar(team.workspace, "New", timezone="UTC")
    owner = signed_in(team.owner)
    assert "data-suggest-browser-zone" in text(owner.get(settings_url(fresh)))
    fresh.min_notice_minutes = 5
    fresh.save()
    assert "data-suggest-browser-zone" not in text(owner.get(settings_url(fresh)))


def test_the_preview_endpoint_draws_the_unsaved_form_and_saves_nothing(team, calendar):
    url = settings_url(calendar) + "/preview"
    owner = signed_in(team.owner)
    form = the_form(calendar, timezone="Asia/Tokyo", min_notice_minutes="90")

    html = text(owner.post(url, form, HTTP_HX_REQUEST="true"))

    assert 'data-testid="preview-unsaved"' in html and "in <strong>Asia/Tokyo</strong>" in html
    assert "09:00–17:00" in html and "1\u00a0h 30\u00a0min from now" in html
    assert "<html" not in html  # the partial only
    calendar.refresh_from_db()
    assert (calendar.timezone, calendar.working_hours, calendar.min_notice_minutes) == (
        "Europe/Berlin",
        None,
        0,
    )

    # A problem in the form: the saved rules' preview, and a word about it.
    broken = text(owner.post(url, the_form(calendar, **{"mon-start": "17:00", "mon-end": "09:00"})))
    assert 'data-testid="preview-invalid"' in broken and 'data-testid="preview-any-time"' in broken
    assert signed_in(team.member).post(url, form).status_code == 403
    assert not AuditRecord.objects.filter(event_type=AuditEvent.CALENDAR_UPDATED).exists()
