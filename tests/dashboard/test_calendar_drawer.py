"""A reservation's drawer on the calendar page: its details in the calendar's time zone and in UTC, its
attendees and audit history, and the owner's actions (cancel a booking, release a hold), taken by the
signed-in person as themselves through the engine's own functions: audited with their email, and the
agent gets its usual webhook."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.utils import timezone

from accounts.models import Membership
from accounts.roles import Role
from agentcal.errors import NotOwner
from audit.events import AuditEvent
from audit.models import AuditRecord
from bookings.engine import (
    booking_cancel,
    booking_cancel_by_person,
    booking_create,
    hold_commit,
    hold_create,
    hold_extend,
    hold_release_by_person,
)
from bookings.models import Reservation, ReservationStatus
from dashboard.links import hold_url
from tests.dashboard.pages_helpers import (
    actor,
    future_day,
    make_calendar,
    signed_in,
    span_on,
    text,
)
from webhooks.models import OutboxEvent
from workspaces.actor import Actor


@pytest.fixture
def calendar(team):
    return make_calendar(team.workspace, "Sales team")


def drawer_url(calendar, reservation_id: str, suffix: str = "") -> str:
    return f"/w/acme/calendars/{calendar.public_id}/reservations/{reservation_id}{suffix}"


def found(pattern: str, html: str, flags: int = 0) -> str:
    """The first group of the pattern's first match in the page (the test fails if there is none)."""
    match = re.search(pattern, html, flags)
    assert match is not None, pattern
    return match.group(1)


def htmx(client, path: str, method: str = "get", **data):
    return getattr(client, method)(path, data, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="drawer-body")


def booking(team, calendar, day: date, at: time = time(10), **fields):
    return booking_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, at), **fields).primary


def hold(team, calendar, day: date, at: time = time(9), **fields):
    group = hold_create(
        actor=actor(team.sdr), calendar=calendar, span=span_on(day, at), ttl_seconds=600, **fields
    )
    return group


# --- What the drawer shows ----------------------------------------------------------------------------------


def test_the_drawer_shows_times_in_the_calendars_zone_and_in_utc_with_attendees_and_the_fencing_token(team):
    calendar = make_calendar(team.workspace, "New York office", timezone="America/New_York")
    day = date(datetime.now(UTC).year + 1, 1, 15)  # winter: New York is UTC-5
    made = booking(
        team,
        calendar,
        day,
        time(15),
        title="Demo <b>call</b>",
        attendees=[
            {"email": "ana@globex.example", "name": "Ana Lopez", "response": "accepted"},
            {"email": "bo@globex.example"},
            "Cy from procurement",
        ],
    )

    response = htmx(signed_in(team.member), drawer_url(calendar, made.booking_id))

    assert response.status_code == 200
    html = text(response)
    assert "<html" not in html and 'data-drawer-reservation="' + made.booking_id + '"' in html
    assert "Demo &lt;b&gt;call&lt;/b&gt;" in html  # the agent's text, escaped
    local = found(r'data-testid="drawer-local-time">([^<]+)<', html)
    assert local == f"{day:%a %-d %b %Y}, 10:00 – 10:30"
    assert "15:00 – " in html and "15:30 UTC" in html
    assert 'data-testid="drawer-status">committed<' in html
    assert f'data-testid="drawer-fencing-token">{made.fencing_token}<' in html
    assert "an older one is refused" in html  # the token in plain words
    assert f'href="/w/acme/agents/{team.sdr.public_id}">SDR bot</a>' in html
    attendees = found(r'data-testid="drawer-attendees">(.*?)</ul>', html, re.S)
    assert "Ana Lopez" in attendees and '<span class="pill partstat accepted">accepted</span>' in attendees
    assert "bo@globex.example" in attendees and "no answer yet" in attendees
    assert "Cy from procurement" in attendees


def test_opened_on_its_own_the_drawer_is_a_page_and_a_holds_id_finds_its_booking(team, calendar):
    day = future_day(3)
    group = hold(team, calendar, day, title="Intro")
    hold_commit(actor=actor(team.sdr), calendar=calendar, hold_token=group.hold_token)
    booking_id = Reservation.objects.get(pk=group.primary.pk).booking_id

    response = signed_in(team.member).get(drawer_url(calendar, group.primary.hold_id))

    html = text(response)
    assert response.status_code == 200 and "<html" in html
    assert f'data-drawer-reservation="{booking_id}"' in html
    assert (
        f'href="/w/acme/calendars/{calendar.public_id}?view=day&amp;date={day.isoformat()}">← Sales team'
        in html
    )


def test_the_history_is_this_reservations_audit_rows_oldest_first_with_who_did_each(team, calendar):
    day = future_day(3)
    group = hold(team, calendar, day, title="Intro")
    hold_extend(
        actor=actor(team.sdr), hold_id=group.primary.hold_id, hold_token=group.hold_token, ttl_seconds=900
    )
    committed = hold_commit(actor=actor(team.sdr), calendar=calendar, hold_token=group.hold_token)
    booking_id = committed.primary.booking_id
    assert booking_id is not None
    booking_cancel(actor=actor(team.sdr), booking_id=booking_id)
    other = booking(team, calendar, day, time(14), title="Someone else's")

    html = text(htmx(signed_in(team.member), drawer_url(calendar, booking_id)))

    history = found(r'data-testid="drawer-history">(.*?)</ol>', html, re.S)
    events = re.findall(r'data-event="([^"]+)"', history)
    assert events == [
        AuditEvent.HOLD_CREATED,
        AuditEvent.HOLD_EXTENDED,
        AuditEvent.COMMIT_CREATED,
        AuditEvent.BOOKING_CANCELLED,
    ]
    assert ">Hold placed</a>" in history and ">Booked</a>" in history and ">Booking cancelled</a>" in history
    assert set(re.findall(r'data-testid="history-who">([^<]+)<', history)) == {"SDR bot"}
    assert other.booking_id not in history
    record = AuditRecord.objects.get(event_type=AuditEvent.COMMIT_CREATED, reservation_public_id=booking_id)
    assert f'href="/w/acme/audit?record={record.public_id}"' in history
    assert 'data-testid="drawer-status">cancelled<' in html and 'data-testid="drawer-action"' not in html


# --- Cancel and release, as a person ------------------------------------------------------------------------


def test_an_owner_cancels_a_booking_after_confirming_and_the_agent_is_told(team, calendar):
    day = future_day(3)
    made = booking(team, calendar, day, title="Demo call")
    owner = signed_in(team.owner)

    first = text(htmx(owner, drawer_url(calendar, made.booking_id)))
    assert f'hx-get="{drawer_url(calendar, made.booking_id)}?confirm=1"' in first
    assert "/cancel" not in first, "the form appears only once the owner asked to cancel"
    confirm = text(htmx(owner, drawer_url(calendar, made.booking_id) + "?confirm=1"))
    assert 'data-testid="drawer-confirm"' in confirm and "Cancel this booking?" in confirm
    assert f'hx-post="{drawer_url(calendar, made.booking_id, "/cancel")}"' in confirm

    response = htmx(owner, drawer_url(calendar, made.booking_id, "/cancel"), method="post")

    assert response.status_code == 200 and response["HX-Trigger"] == "calendar-changed"
    html = text(response)
    assert 'data-testid="drawer-notice">Booking cancelled. SDR bot has been told.<' in html
    assert 'data-testid="drawer-status">cancelled<' in html
    assert Reservation.objects.get(pk=made.pk).status == ReservationStatus.CANCELLED
    audit = AuditRecord.objects.get(event_type=AuditEvent.BOOKING_CANCELLED)
    assert (audit.actor_user, audit.agent_public_id, audit.outcome) == ("olivia@acme.test", "", "success")
    assert audit.reservation_public_id == made.booking_id and audit.details == {
        "agent_id": team.sdr.public_id
    }
    event = OutboxEvent.objects.get(event_type="booking.cancelled")
    assert event.agent_id == team.sdr.pk and event.payload["booking"]["id"] == made.booking_id
    assert event.payload["booking"]["status"] == "cancelled"
    # Its history now says who cancelled it.
    assert 'data-testid="history-who">olivia@acme.test<' in html


def test_an_admin_releases_a_hold_without_javascript_and_lands_back_on_the_day(team, calendar):
    day = future_day(3)
    group = hold(team, calendar, day, title="Intro")
    admin = signed_in(team.admin)

    response = admin.post(drawer_url(calendar, group.primary.hold_id, "/release"))

    assert response.status_code == 302
    assert response["Location"] == (
        f"/w/acme/calendars/{calendar.public_id}?view=day&date={day.isoformat()}#{group.primary.hold_id}"
    )
    assert "Hold released. SDR bot has been told." in text(admin.get(response["Location"]))
    assert Reservation.objects.get(pk=group.primary.pk).status == ReservationStatus.RELEASED
    audit = AuditRecord.objects.get(event_type=AuditEvent.HOLD_RELEASED)
    assert (audit.actor_user, audit.agent_public_id) == ("adam@acme.test", "")
    event = OutboxEvent.objects.get(event_type="hold.released")
    assert event.agent_id == team.sdr.pk and event.payload["hold"]["id"] == group.primary.hold_id


def test_a_hold_awaiting_approval_is_left_to_its_approval(team, calendar):
    day = future_day(3)
    group = hold(team, calendar, day)
    Reservation.objects.filter(pk=group.primary.pk).update(awaiting_approval="apr_waiting")
    owner = signed_in(team.owner)

    drawer = text(htmx(owner, drawer_url(calendar, group.primary.hold_id)))
    assert 'data-testid="drawer-action"' not in drawer
    assert 'href="/w/acme/approvals/apr_waiting">approve or deny the request</a>' in drawer

    refused = owner.post(drawer_url(calendar, group.primary.hold_id, "/release"))

    assert refused.status_code == 409
    assert "Not released: Hold " in text(refused) and "waits for approval apr_waiting" in text(refused)
    assert Reservation.objects.get(pk=group.primary.pk).status == ReservationStatus.HELD
    rejected = AuditRecord.objects.get(event_type=AuditEvent.HOLD_RELEASE_REJECTED)
    assert (rejected.actor_user, rejected.outcome, rejected.failure_reason) == (
        "olivia@acme.test",
        "rejected",
        "hold_awaiting_approval",
    )
    assert not OutboxEvent.objects.filter(event_type="hold.released").exists()


def test_ending_what_has_ended_says_so_in_the_drawer(team, calendar):
    day = future_day(3)
    made = booking(team, calendar, day)
    lapsed = hold(team, calendar, day, time(14))
    Reservation.objects.filter(pk=lapsed.primary.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    owner = signed_in(team.owner)
    cancel = drawer_url(calendar, made.booking_id, "/cancel")
    assert htmx(owner, cancel, method="post").status_code == 200

    again = htmx(owner, cancel, method="post")
    assert again.status_code == 200  # htmx swaps only 2xx answers: the refusal shows in the drawer
    assert 'data-testid="drawer-error">This booking was already cancelled.<' in text(again)
    assert "HX-Trigger" not in again
    assert AuditRecord.objects.filter(event_type=AuditEvent.BOOKING_CANCELLED).count() == 1

    late = htmx(owner, drawer_url(calendar, lapsed.primary.hold_id, "/release"), method="post")
    assert f"Not released: Hold {lapsed.primary.hold_id} expired" in text(late)
    assert 'data-testid="drawer-status">lapsed<' in text(late)


def test_a_hold_cannot_be_cancelled_as_a_booking(team, calendar):
    group = hold(team, calendar, future_day(3))
    response = signed_in(team.owner).post(drawer_url(calendar, group.primary.hold_id, "/cancel"))
    assert response.status_code == 409 and "release it instead" in text(response)
    assert Reservation.objects.get(pk=group.primary.pk).status == ReservationStatus.HELD


# --- Who may ------------------------------------------------------------------------------------------------


def test_only_owners_and_admins_may_end_a_reservation(team, calendar, django_user_model):
    viewer = django_user_model.objects.create_user(username="vic@acme.test", email="vic@acme.test")
    Membership.objects.create(user=viewer, workspace=team.workspace, role=Role.VIEWER)
    day = future_day(3)
    made = booking(team, calendar, day)
    group = hold(team, calendar, day)

    for person in (team.member, viewer):  # an approver, a viewer
        client = signed_in(person)
        drawer = text(htmx(client, drawer_url(calendar, made.booking_id)))
        assert "Owners and admins can cancel this booking." in drawer
        assert 'data-testid="drawer-action"' not in drawer
        assert "drawer-confirm" not in text(
            htmx(client, drawer_url(calendar, made.booking_id) + "?confirm=1")
        )
        assert client.post(drawer_url(calendar, made.booking_id, "/cancel")).status_code == 403
        assert client.post(drawer_url(calendar, group.primary.hold_id, "/release")).status_code == 403

    assert Reservation.objects.get(pk=made.pk).status == ReservationStatus.COMMITTED
    assert Reservation.objects.get(pk=group.primary.pk).status == ReservationStatus.HELD
    assert not AuditRecord.objects.filter(actor_user__in=["mo@acme.test", "vic@acme.test"]).exists()


def test_another_workspace_sees_nothing_and_ids_stay_within_their_calendar(team, calendar):
    made = booking(team, calendar, future_day(3))
    outsider = signed_in(team.outsider)
    assert outsider.get(drawer_url(calendar, made.booking_id)).status_code == 404
    assert outsider.post(drawer_url(calendar, made.booking_id, "/cancel")).status_code == 404
    theirs = make_calendar(team.other_workspace, "Globex board")
    assert (
        outsider.get(f"/w/globex/calendars/{theirs.public_id}/reservations/{made.booking_id}").status_code
        == 404
    )

    other_calendar = make_calendar(team.workspace, "Support")
    owner = signed_in(team.owner)
    assert owner.get(drawer_url(other_calendar, made.booking_id)).status_code == 404
    assert owner.post(drawer_url(other_calendar, made.booking_id, "/cancel")).status_code == 404
    assert Reservation.objects.get(pk=made.pk).status == ReservationStatus.COMMITTED


def test_the_actions_take_only_posts_with_the_csrf_token(team, calendar):
    made = booking(team, calendar, future_day(3))
    cancel = drawer_url(calendar, made.booking_id, "/cancel")
    assert signed_in(team.owner).get(cancel).status_code == 405

    strict = signed_in(team.owner, enforce_csrf_checks=True)
    assert strict.post(cancel).status_code == 403
    assert Reservation.objects.get(pk=made.pk).status == ReservationStatus.COMMITTED

    page = text(strict.get(drawer_url(calendar, made.booking_id) + "?confirm=1"))
    token = found(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert strict.post(cancel, {"csrfmiddlewaretoken": token}).status_code == 302
    assert Reservation.objects.get(pk=made.pk).status == ReservationStatus.CANCELLED


def test_the_engine_takes_a_persons_end_only_from_a_person(team, calendar):
    made = booking(team, calendar, future_day(3))
    group = hold(team, calendar, future_day(3), time(14))
    with pytest.raises(NotOwner):
        booking_cancel_by_person(actor=actor(team.sdr), booking_id=made.booking_id)
    with pytest.raises(NotOwner):
        hold_release_by_person(
            actor=Actor(workspace=team.workspace, agent=None), hold_id=group.primary.hold_id
        )
    assert Reservation.objects.get(pk=made.pk).status == ReservationStatus.COMMITTED
    assert Reservation.objects.get(pk=group.primary.pk).status == ReservationStatus.HELD


# --- The link other pages use -------------------------------------------------------------------------------


def test_a_holds_link_opens_its_day_and_drawer_in_all_24_hours_when_it_is_outside_working_hours(
    team, calendar
):
    day = future_day(3)
    inside = hold(team, calendar, day, time(9))
    early = hold(team, calendar, day, time(5))
    base = f"/w/acme/calendars/{calendar.public_id}"

    assert hold_url(team.workspace, inside.primary.hold_id) == (
        f"{base}?view=day&date={day.isoformat()}#{inside.primary.hold_id}"
    )
    assert hold_url(team.workspace, early.primary.hold_id) == (
        f"{base}?view=day&date={day.isoformat()}&hours=24#{early.primary.hold_id}"
    )
    assert hold_url(team.other_workspace, inside.primary.hold_id) is None
    assert hold_url(team.workspace, "hld_nothing") is None
