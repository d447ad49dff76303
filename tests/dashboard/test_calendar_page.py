"""Calendars: the list with live counts and the live day/week timeline in the calendar's time zone, on
working hours and live reservations unless asked for all 24 hours and the ended ones."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.utils import timezone

from bookings.engine import booking_cancel, booking_create, hold_create
from bookings.models import Reservation
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    signed_in,
    span_on,
    text,
)

BLOCK = re.compile(
    r'class="block (\w+)(?: [\w-]+)*" data-testid="block" data-status="([\w ]+)" data-reservation="([^"]+)"'
)


@pytest.fixture
def calendar(team):
    return make_calendar(team.workspace, "Sales team")


def url(calendar, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return f"/w/acme/calendars/{calendar.public_id}" + (f"?{params}" if params else "")


def found(pattern: str, html: str, flags: int = 0) -> str:
    """The first group of the pattern's first match in the page (the test fails if there is none)."""
    match = re.search(pattern, html, flags)
    assert match is not None, pattern
    return match.group(1)


def blocks(html: str) -> dict[str, tuple[str, str]]:
    """reservation id -> (css kind, status label) for every block on the timeline."""
    return {reservation: (kind, label) for kind, label, reservation in BLOCK.findall(html)}


def reservation_id(group) -> str:
    return group.primary.booking_id or group.primary.hold_id


def reserve_every_kind(team, calendar, day: date) -> dict[str, str]:
    sdr, boss = actor(team.sdr), actor(team.exec_assistant)
    held = hold_create(
        actor=sdr,
        calendar=calendar,
        span=span_on(day, time(9)),
        ttl_seconds=600,
        title="<script>alert(1)</script>",
    )
    committed = booking_create(actor=sdr, calendar=calendar, span=span_on(day, time(10)), title="Demo call")
    frozen = booking_create(actor=sdr, calendar=calendar, span=span_on(day, time(11)), title="Board review")
    Reservation.objects.filter(pk=frozen.primary.pk).update(
        bump_window_ends_at=timezone.now() - timedelta(hours=1)
    )
    cancelled = booking_create(actor=sdr, calendar=calendar, span=span_on(day, time(12)), title="Dropped")
    assert cancelled.primary.booking_id is not None
    booking_cancel(actor=sdr, booking_id=cancelled.primary.booking_id)
    bumped = booking_create(actor=sdr, calendar=calendar, span=span_on(day, time(13)), title="Low priority")
    bumper = booking_create(actor=boss, calendar=calendar, span=span_on(day, time(13)), title="CEO sync")
    lapsed = hold_create(actor=sdr, calendar=calendar, span=span_on(day, time(14)), title="Forgotten hold")
    Reservation.objects.filter(pk=lapsed.primary.pk).update(expires_at=timezone.now() - timedelta(minutes=5))
    groups = {
        "held": held,
        "committed": committed,
        "frozen": frozen,
        "cancelled": cancelled,
        "bumped": bumped,
        "bumper": bumper,
        "lapsed": lapsed,
    }
    return {name: reservation_id(group) for name, group in groups.items()}


def test_the_list_shows_calendars_with_live_counts(team, calendar):
    make_calendar(team.workspace, "Empty room")
    day = future_day(3)
    hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(9)), ttl_seconds=600)
    booking_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(10)))
    lapsed = hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(11)))
    Reservation.objects.filter(pk=lapsed.primary.pk).update(expires_at=timezone.now() - timedelta(minutes=1))

    response = signed_in(team.member).get("/w/acme/calendars")

    assert response.status_code == 200
    html = text(response)
    assert "Sales team" in html and "Empty room" in html
    assert f'href="/w/acme/calendars/{calendar.public_id}"' in html
    (sales,) = [row for row in html.split('data-testid="calendar-row"')[1:] if "Sales team" in row]
    assert '<span class="pill held" data-testid="live-holds">1</span>' in sales
    assert '<span class="pill committed" data-testid="upcoming">1</span>' in sales


def test_the_list_has_an_empty_state(team):
    assert "No calendars yet" in text(signed_in(team.member).get("/w/acme/calendars"))


def test_the_week_shows_live_blocks_and_says_how_many_ended_ones_it_leaves_out(team, calendar):
    day = future_day(3)
    ids = reserve_every_kind(team, calendar, day)

    response = signed_in(team.member).get(url(calendar, view="week", date=day.isoformat()))

    assert response.status_code == 200
    html = text(response)
    assert blocks(html) == {
        ids["held"]: ("held", "held"),
        ids["committed"]: ("committed", "committed"),
        ids["frozen"]: ("frozen", "frozen"),
        ids["bumper"]: ("committed", "committed"),
    }
    assert "3 ended (released, expired, evicted, bumped, cancelled) not shown" in html
    assert html.count('data-testid="day-column"') == 7
    held = Reservation.objects.get(hold_id=ids["held"])
    assert held.expires_at is not None
    assert f'data-countdown="{held.expires_at.isoformat()}"' in html
    # Each block says what it is, whose it is and at what priority.
    assert "Demo call" in html and "SDR bot" in html and "P500" in html and "CEO sync" in html


def test_the_ended_toggle_shows_the_ended_blocks_too(team, calendar):
    day = future_day(3)
    ids = reserve_every_kind(team, calendar, day)
    week = text(signed_in(team.member).get(url(calendar, view="week", date=day.isoformat())))
    toggle = f"/w/acme/calendars/{calendar.public_id}?view=week&amp;date={day.isoformat()}&amp;ended=1"
    assert f'href="{toggle}"' in week

    html = text(signed_in(team.member).get(url(calendar, view="week", date=day.isoformat(), ended="1")))

    assert blocks(html) == {
        ids["held"]: ("held", "held"),
        ids["committed"]: ("committed", "committed"),
        ids["frozen"]: ("frozen", "frozen"),
        ids["cancelled"]: ("ended", "cancelled"),
        ids["bumped"]: ("ended", "bumped"),
        ids["bumper"]: ("committed", "committed"),
        ids["lapsed"]: ("ended", "lapsed"),
    }
    assert "not shown" not in html
    # Every link on the page keeps the choice (the next week, the day view, the 24 h toggle).
    assert "&amp;ended=1" in found(r'href="([^"]+)" data-testid="next"', html)
    assert "&amp;ended=1" in found(r'href="([^"]+)"[^>]*data-testid="hours-all"', html)


def test_a_hold_awaiting_approval_is_marked_and_links_to_its_approval(team, calendar):
    day = future_day(3)
    gated = hold_create(
        actor=actor(team.sdr),
        calendar=calendar,
        span=span_on(day, time(9)),
        ttl_seconds=600,
        title="Discount",
    )
    Reservation.objects.filter(pk=gated.primary.pk).update(awaiting_approval="apr_waiting")
    client = signed_in(team.member)

    html = text(client.get(url(calendar, view="day", date=day.isoformat())))

    assert blocks(html) == {gated.primary.hold_id: ("held", "awaiting approval")}
    assert re.search(r'class="block held[\w -]* gated"', html)
    assert 'href="/w/acme/approvals/apr_waiting" data-testid="approval-pill"' in html
    drawer = text(client.get(f"/w/acme/calendars/{calendar.public_id}/reservations/{gated.primary.hold_id}"))
    assert 'href="/w/acme/approvals/apr_waiting" data-testid="approval-link"' in drawer


def test_untrusted_titles_are_escaped(team, calendar):
    day = future_day(3)
    reserve_every_kind(team, calendar, day)
    html = text(signed_in(team.member).get(url(calendar, view="day", date=day.isoformat())))
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_times_are_shown_in_the_calendars_time_zone(team):
    calendar = make_calendar(team.workspace, "New York office", timezone="America/New_York")
    day = date(datetime.now(UTC).year + 1, 1, 15)  # winter: New York is UTC-5
    booking = booking_create(
        actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(15)), title="Standup"
    )
    late = booking_create(
        actor=actor(team.sdr),
        calendar=calendar,
        span=span_on(day + timedelta(days=1), time(3)),
        title="Late call",
    )
    client = signed_in(team.member)

    html = text(client.get(url(calendar, view="day", date=day.isoformat())))

    assert "10:00–10:30" in html and "America/New_York" in html  # 15:00 UTC
    # 03:00 UTC the next day is 22:00 here: outside working hours, so counted, and drawn in the 24 h view.
    assert set(blocks(html)) == {booking.primary.booking_id}
    assert 'data-testid="later">↓ 1 later</a>' in html
    all_day = text(client.get(url(calendar, view="day", date=day.isoformat(), hours="24")))
    assert "22:00–22:30" in all_day
    assert set(blocks(all_day)) == {booking.primary.booking_id, late.primary.booking_id}
    next_day = text(client.get(url(calendar, view="day", date=(day + timedelta(days=1)).isoformat())))
    assert blocks(next_day) == {}


def test_day_and_week_navigation(team, calendar):
    day = date(2031, 3, 12)  # a Wednesday
    client = signed_in(team.member)

    week = text(client.get(url(calendar, view="week", date=day.isoformat())))
    assert re.findall(r'data-day="([\d-]+)"', week) == [f"2031-03-{d}" for d in range(10, 17)]
    assert "10 – 16 Mar 2031" in week
    assert (
        f'href="/w/acme/calendars/{calendar.public_id}?view=week&amp;date=2031-03-05" data-testid="prev"'
        in week
    )
    assert (
        f'href="/w/acme/calendars/{calendar.public_id}?view=week&amp;date=2031-03-19" data-testid="next"'
        in week
    )
    today = timezone.now().date().isoformat()
    assert f'?view=week&amp;date={today}" data-testid="today"' in week

    one_day = text(client.get(url(calendar, view="day", date=day.isoformat())))
    assert re.findall(r'data-day="([\d-]+)"', one_day) == ["2031-03-12"]
    assert "Wednesday, 12 March 2031" in one_day
    assert "?view=day&amp;date=2031-03-11" in one_day and "?view=day&amp;date=2031-03-13" in one_day


def test_a_bad_date_or_view_falls_back_to_this_week(team, calendar):
    response = signed_in(team.member).get(url(calendar, view="month", date="soon"))
    assert response.status_code == 200
    assert text(response).count('data-testid="day-column"') == 7
    assert 'class="timeline-col today"' in text(response)


@pytest.mark.parametrize("view", ["day", "week"])
@pytest.mark.parametrize("day", ["0001-01-01", "9999-12-31"])
def test_a_date_at_the_edge_of_the_calendar_falls_back_to_today(team, calendar, view, day):
    response = signed_in(team.member).get(url(calendar, view=view, date=day))
    assert response.status_code == 200
    assert 'class="timeline-col today"' in text(response)


def test_the_timeline_polls_itself_and_the_partial_is_just_the_timeline(team, calendar):
    day = future_day(3)
    ids = reserve_every_kind(team, calendar, day)
    client = signed_in(team.member)
    page = text(client.get(url(calendar, view="week", date=day.isoformat())))
    self_url = f"/w/acme/calendars/{calendar.public_id}?view=week&amp;date={day.isoformat()}"
    assert f'hx-get="{self_url}" hx-trigger="every 5s, calendar-changed from:body"' in page

    partial = client.get(url(calendar, view="week", date=day.isoformat()), HTTP_HX_REQUEST="true")

    assert partial.status_code == 200
    body = text(partial)
    assert "<html" not in body and "sidebar" not in body and "hx-trigger" not in body
    live = {ids[name] for name in ("held", "committed", "frozen", "bumper")}
    assert set(blocks(body)) == live


def test_an_empty_range_says_so(team, calendar):
    html = text(signed_in(team.member).get(url(calendar, view="day", date="2031-03-12")))
    assert 'data-testid="calendar-empty"' in html and blocks(html) == {}


def test_another_workspaces_calendar_is_404(team, calendar):
    theirs = make_calendar(team.other_workspace, "Globex board")
    member = signed_in(team.member)
    assert member.get(f"/w/acme/calendars/{theirs.public_id}").status_code == 404
    assert member.get(f"/w/acme/calendars/{theirs.public_id}", HTTP_HX_REQUEST="true").status_code == 404
    assert member.get(f"/w/globex/calendars/{theirs.public_id}").status_code == 404
    assert "Globex board" not in text(member.get("/w/acme/calendars"))

    outsider = signed_in(team.outsider)
    assert outsider.get("/w/acme/calendars").status_code == 404
    assert outsider.get(url(calendar)).status_code == 404
    assert outsider.get(url(calendar), HTTP_HX_REQUEST="true").status_code == 404


def test_anonymous_is_sent_to_sign_in(team, calendar, client):
    for path in ("/w/acme/calendars", url(calendar)):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/auth/sign-in")


def test_overlapping_blocks_sit_side_by_side(team, calendar):
    day = future_day(3)
    ids = reserve_every_kind(team, calendar, day)
    html = text(signed_in(team.member).get(url(calendar, view="day", date=day.isoformat(), ended="1")))

    def geometry(reservation: str) -> dict[str, str]:
        """The block's data-top/-height/-left/-width, which app.js applies as its style."""
        match = re.search(rf'data-reservation="{reservation}"\s+([^>]*)>', html)
        assert match is not None, reservation
        return dict(re.findall(r'data-(top|height|left|width)="([^"]*)"', match.group(1)))

    # The bumped booking and the one that took its place share 13:00 and split the column, the live one
    # on the left.
    bumped, bumper = geometry(ids["bumped"]), geometry(ids["bumper"])
    assert bumped["width"] == bumper["width"] == "calc(50.0000% - 6px)"
    assert (bumper["left"], bumped["left"]) == ("calc(0.0000% + 3px)", "calc(50.0000% + 3px)")
    assert bumped["top"] == bumper["top"]
    assert geometry(ids["committed"])["width"] == "calc(100.0000% - 6px)"
    assert geometry(ids["committed"])["left"] == "calc(0.0000% + 3px)"
    assert " style=" not in html


def test_a_crowd_of_ended_holds_folds_into_one_chip(team, calendar):
    day = future_day(3)
    for _ in range(8):
        released = hold_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(10)))
        Reservation.objects.filter(pk=released.primary.pk).update(status="released")
    demo = booking_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(10)), title="Demo")

    html = text(signed_in(team.member).get(url(calendar, view="week", date=day.isoformat(), ended="1")))

    assert set(blocks(html)) == {demo.primary.booking_id}
    chip = re.search(r'<a class="more-chip" href="([^"]+)" data-testid="more-chip"[^>]*>\+(\d+)</a>', html)
    assert chip is not None and chip.group(2) == "8"
    assert f"view=day&amp;date={day.isoformat()}" in chip.group(1)  # the day has room for more lanes


def test_working_hours_by_default_and_all_24_on_request(team, calendar):
    client = signed_in(team.member)
    quiet = text(client.get(url(calendar, view="day", date="2031-03-12")))
    assert ">08:00<" in quiet and ">17:00<" in quiet and ">07:00<" not in quiet and ">18:00<" not in quiet
    assert 'data-hours="10"' in quiet

    day = future_day(3)
    early = booking_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(5)))
    late = booking_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(22, 30)))
    busy = text(client.get(url(calendar, view="day", date=day.isoformat())))
    assert ">05:00<" not in busy and blocks(busy) == {}
    assert 'data-testid="earlier">↑ 1 earlier</a>' in busy and 'data-testid="later">↓ 1 later</a>' in busy
    assert "2 outside 08–18" in busy

    whole = text(client.get(url(calendar, view="day", date=day.isoformat(), hours="24")))
    assert ">00:00<" in whole and ">23:00<" in whole and 'data-hours="24"' in whole
    assert set(blocks(whole)) == {early.primary.booking_id, late.primary.booking_id}
    assert 'data-testid="earlier"' not in whole
