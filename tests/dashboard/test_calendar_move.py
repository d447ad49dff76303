"""Moving a booking from its drawer: a day and two times in the calendar's zone, taken by the signed-in
person through the engine's booking_move (audited as them, the agent told), its refusals in words on the
form with the free times offered instead, and the booking's times over its life."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

import pytest

from accounts.models import Membership
from accounts.roles import Role
from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.engine import booking_create
from bookings.models import Reservation
from tests.dashboard.pages_helpers import actor, make_calendar, signed_in, span_on, text
from webhooks.models import OutboxEvent

BERLIN = "Europe/Berlin"


@pytest.fixture
def calendar(team):
    return make_calendar(team.workspace, "Berlin office", timezone=BERLIN)


def winter_day() -> date:
    """A day next January: Berlin is UTC+1, so 10:00 UTC reads 11:00 there."""
    day = date(datetime.now(UTC).year + 1, 1, 14)
    return day + timedelta(days=(2 - day.weekday()) % 7)  # a Wednesday


def drawer_url(calendar, booking_id: str, suffix: str = "") -> str:
    return f"/w/acme/calendars/{calendar.public_id}/reservations/{booking_id}{suffix}"


def book(team, calendar, at: time, title: str = "Demo call"):
    return booking_create(
        actor=actor(team.sdr), calendar=calendar, span=span_on(winter_day(), at), title=title
    ).primary


def htmx_post(client, path: str, data: dict[str, str]):
    return client.post(path, data, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="drawer-body")


def move_to(start: str, end: str) -> dict[str, str]:
    return {"date": winter_day().isoformat(), "start": start, "end": end}


def spans_of(html: str) -> list[str]:
    listing = re.search(r'data-testid="drawer-spans">(.*?)</ol>', html, re.S)
    assert listing is not None
    return [
        re.sub(r"<[^>]+>", "", item).split(" at ")[0].strip()
        for item in re.findall(r"<li>(.*?)</li>", listing.group(1), re.S)
    ]


def test_the_form_is_prefilled_with_the_current_span_in_the_calendars_zone(team, calendar):
    made = book(team, calendar, time(10))

    html = text(signed_in(team.owner).get(drawer_url(calendar, made.booking_id)))

    form = re.search(r'data-testid="move-form"(.*?)</form>', html, re.S)
    assert form is not None
    assert f'value="{winter_day().isoformat()}"' in form.group(1)
    assert 'name="start" value="11:00"' in form.group(1) and 'name="end" value="11:30"' in form.group(1)
    assert "New time, in Europe/Berlin" in form.group(1) and "csrfmiddlewaretoken" in form.group(1)
    assert spans_of(html) == [f"Booked for {winter_day():%a} {winter_day().day} Jan 11:00–11:30 by SDR bot"]


def test_an_owner_moves_a_booking_and_its_history_shows_where_it_was(team, calendar):
    made = book(team, calendar, time(10))
    owner = signed_in(team.owner)

    response = htmx_post(owner, drawer_url(calendar, made.booking_id, "/move"), move_to("15:00", "15:30"))

    assert response.status_code == 200 and response["HX-Trigger"] == "calendar-changed"
    html = text(response)
    words = f"{winter_day():%a} {winter_day().day} Jan 15:00–15:30"
    assert f"Moved Demo call to {words} (Europe/Berlin). SDR bot has been told." in html
    assert re.search(r'data-testid="drawer-local-time">[^<]*15:00 – 15:30<', html)
    assert 'name="start" value="15:00"' in html  # the form now starts from the new span
    moved = Reservation.objects.get(pk=made.pk)
    assert (moved.start_time, moved.booking_id) == (span_on(winter_day(), time(14)).start, made.booking_id)
    audit = AuditRecord.objects.get(event_type=AuditEvent.BOOKING_MOVED)
    assert (audit.actor_user, audit.agent_public_id) == ("olivia@acme.test", "")
    assert audit.details["to"]["start_time"].startswith(f"{winter_day().isoformat()}T14:00")
    assert OutboxEvent.objects.filter(event_type="booking.moved", agent_id=team.sdr.pk).count() == 1
    assert spans_of(html) == [
        f"Booked for {winter_day():%a} {winter_day().day} Jan 11:00–11:30 by SDR bot",
        f"Moved to {words} by olivia@acme.test",
    ]
    assert "Times (Europe/Berlin)" in html


def test_without_javascript_the_move_redirects_to_the_new_day_with_the_notice(team, calendar):
    made = book(team, calendar, time(10))
    admin = signed_in(team.admin)

    response = admin.post(drawer_url(calendar, made.booking_id, "/move"), move_to("13:00", "14:00"))

    assert response.status_code == 302 and response["Location"].endswith(f"#{made.hold_id}")
    page = text(admin.get(response["Location"]))
    assert f"Moved Demo call to {winter_day():%a} {winter_day().day} Jan 13:00–14:00 (Europe/Berlin)." in page
    assert AuditRecord.objects.get(event_type=AuditEvent.BOOKING_MOVED).actor_user == "adam@acme.test"


def test_a_taken_time_is_refused_in_words_with_free_times_offered_and_nothing_changes(team, calendar):
    made = book(team, calendar, time(10))
    book(team, calendar, time(14), title="In the way")
    owner = signed_in(team.owner)

    refused = owner.post(drawer_url(calendar, made.booking_id, "/move"), move_to("15:00", "15:30"))

    assert refused.status_code == 409
    html = text(refused)
    assert re.search(r'data-testid="move-error">Not moved: [^<]+<', html)
    offers = re.findall(r'data-testid="move-offer">Move to ([^<]+)<', html)
    assert offers and all(re.fullmatch(r"\w{3} \d+ Jan \d\d:\d\d–\d\d:\d\d", offer) for offer in offers)
    assert 'name="start" value="15:00"' in html  # the form keeps what was asked
    assert Reservation.objects.get(pk=made.pk).start_time == span_on(winter_day(), time(10)).start
    assert not AuditRecord.objects.filter(event_type=AuditEvent.BOOKING_MOVED).exists()
    assert not OutboxEvent.objects.filter(event_type="booking.moved").exists()

    # An offered time's button submits the move to it.
    first = re.search(
        r'name="date" value="([^"]+)">\s*<input type="hidden" name="start" value="([^"]+)">\s*'
        r'<input type="hidden" name="end" value="([^"]+)">',
        html,
    )
    assert first is not None
    taken = htmx_post(
        owner,
        drawer_url(calendar, made.booking_id, "/move"),
        {"date": first.group(1), "start": first.group(2), "end": first.group(3)},
    )
    assert f"Moved Demo call to {offers[0]} (Europe/Berlin)." in text(taken)


def test_a_bad_form_is_answered_on_the_form(team, calendar):
    made = book(team, calendar, time(10))
    owner = signed_in(team.owner)
    url = drawer_url(calendar, made.booking_id, "/move")

    backwards = owner.post(url, move_to("15:00", "14:00"))
    assert backwards.status_code == 422
    assert "The end must be after the start, on the same day." in text(backwards)
    last_of_march = date(winter_day().year, 3, 31)
    clocks_change = last_of_march - timedelta(days=(last_of_march.weekday() + 1) % 7)  # its last Sunday
    gap = owner.post(url, {"date": clocks_change.isoformat(), "start": "02:30", "end": "03:30"})
    assert "does not exist in Europe/Berlin" in text(gap)  # the clocks skip 02:00–03:00 that night
    assert "Enter a valid time." in text(owner.post(url, move_to("25:00", "26:00")))
    # Berlin's midnight on the first day of year 1 is still in year 0 in UTC, which no date can hold.
    first_day = owner.post(url, {"date": "0001-01-01", "start": "00:30", "end": "01:30"})
    assert first_day.status_code == 422
    assert "Pick a day a booking can be moved to." in text(first_day)
    assert Reservation.objects.get(pk=made.pk).start_time == span_on(winter_day(), time(10)).start


def test_a_viewer_or_approver_cannot_move_and_sees_no_form(team, calendar, django_user_model):
    viewer = django_user_model.objects.create_user(username="vic@acme.test", email="vic@acme.test")
    Membership.objects.create(user=viewer, workspace=team.workspace, role=Role.VIEWER)
    made = book(team, calendar, time(10))

    for person in (viewer, team.member):
        client = signed_in(person)
        assert 'data-testid="move-form"' not in text(client.get(drawer_url(calendar, made.booking_id)))
        assert (
            client.post(drawer_url(calendar, made.booking_id, "/move"), move_to("15:00", "15:30")).status_code
            == 403
        )
    assert (
        signed_in(team.outsider)
        .post(drawer_url(calendar, made.booking_id, "/move"), move_to("15:00", "15:30"))
        .status_code
        == 404
    )
    assert Reservation.objects.get(pk=made.pk).start_time == span_on(winter_day(), time(10)).start
    assert not AuditRecord.objects.filter(event_type__startswith="calendar.booking.move").exists()


def test_the_move_takes_only_posts_with_the_csrf_token(team, calendar):
    made = book(team, calendar, time(10))
    url = drawer_url(calendar, made.booking_id, "/move")
    strict = signed_in(team.owner, enforce_csrf_checks=True)
    assert strict.get(url).status_code == 405
    assert strict.post(url, move_to("15:00", "15:30")).status_code == 403
    assert Reservation.objects.get(pk=made.pk).start_time == span_on(winter_day(), time(10)).start

    page = text(strict.get(drawer_url(calendar, made.booking_id)))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    assert (
        strict.post(url, {**move_to("15:00", "15:30"), "csrfmiddlewaretoken": token.group(1)}).status_code
        == 302
    )
    assert Reservation.objects.get(pk=made.pk).start_time == span_on(winter_day(), time(14)).start


def test_a_hold_or_an_ended_booking_offers_no_move(team, calendar):
    made = book(team, calendar, time(10))
    owner = signed_in(team.owner)
    owner.post(drawer_url(calendar, made.booking_id, "/cancel"))

    html = text(owner.get(drawer_url(calendar, made.booking_id)))
    assert 'data-testid="move-form"' not in html
    refused = owner.post(drawer_url(calendar, made.booking_id, "/move"), move_to("15:00", "15:30"))
    assert refused.status_code == 409 and "Not moved: " in text(refused)
