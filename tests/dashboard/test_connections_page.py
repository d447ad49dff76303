"""A calendar's upstream calendar on the dashboard: the panel on the calendar's page, connecting to a
real CalDAV server (Radicale), sync now and disconnect, busy time and conflicts on the timeline, the
link's status on the calendar list, and the metrics page's sync section."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from django.utils import timezone

from audit.models import AuditRecord
from bookings.engine import booking_create
from bookings.models import BusyBlock, Calendar, Reservation
from dashboard.forms import ConnectForm
from dashboard.viewmodels.connection_panel import ConnectionPanel
from sync.credentials import seal
from sync.models import Connection, ConnectionStatus, IngestionRecord, UpstreamEvent
from sync.services import connection_sync
from tests.dashboard.pages_helpers import (
    Team,
    actor,
    future_day,
    make_calendar,
    make_team,
    signed_in,
    span_on,
    tables_containing,
    text,
)
from tests.sync.radicale import CalDAVAccount, Human, ics_event

ERROR_DETAIL = "The CalDAV server is down for maintenance"


@pytest.fixture
def team(db: Any, django_user_model: Any) -> Team:
    return make_team(django_user_model)


@pytest.fixture
def calendar(team: Team) -> Calendar:
    return make_calendar(team.workspace, "Sales team")


@pytest.fixture
def private_targets(settings: Any) -> Any:
    """Radicale listens on 127.0.0.1, which upstream URLs may not reach in production."""
    settings.SYNC_ALLOW_PRIVATE_TARGETS = True
    return settings


def page(calendar: Calendar, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return f"/w/{calendar.workspace.slug}/calendars/{calendar.public_id}" + (f"?{params}" if params else "")


def connect_url(calendar: Calendar) -> str:
    return f"/w/{calendar.workspace.slug}/calendars/{calendar.public_id}/connection"


def action_url(connection: Connection, action: str) -> str:
    return f"/w/{connection.workspace.slug}/connections/{connection.public_id}/{action}"


def panel(html: str) -> str:
    match = re.search(r'<section class="card connection.*?</section>', html, re.S)
    assert match is not None, "no upstream calendar panel"
    return match.group(0)


def link(calendar: Calendar, **fields: Any) -> Connection:
    """A connection as a sync leaves it, without a server (for what the page shows of each state)."""
    values: dict[str, Any] = {
        "workspace": calendar.workspace,
        "calendar": calendar,
        "provider": "caldav",
        "url": "https://caldav.example.com/dav/olivia/work/",
        "username": "olivia",
        "secret": seal({"password": "never-shown-app-password"}),
        "created_by_user": "olivia@acme.test",
        **fields,
    }
    return Connection.objects.create(**values)


def credentials(account: CalDAVAccount, **override: str) -> dict[str, str]:
    return {"url": account.url, "username": account.username, "password": account.password, **override}


# --- The panel ----------------------------------------------------------------------------------------------


def test_an_unlinked_calendar_explains_linking_and_offers_owners_the_form(
    team: Team, calendar: Calendar
) -> None:
    for person in (team.owner, team.admin):
        response = signed_in(person).get(page(calendar))
        assert response.status_code == 200
        html = panel(text(response))
        assert 'data-state="unlinked"' in html
        assert "Link the owner's own calendar and the events in it block agents here" in html
        assert f'action="{connect_url(calendar)}"' in html and "csrfmiddlewaretoken" in html
        assert 'name="url"' in html and 'name="username"' in html
        password = re.search(r'<input id="con-password" name="password" type="password"[^>]*>', html)
        assert password is not None and 'autocomplete="off"' in password.group(0)
        assert "Connect CalDAV" in html
        assert "hx-get" not in html, "an unlinked panel does not poll (it would wipe what is being typed)"


def test_members_see_the_panel_but_no_forms(team: Team, calendar: Calendar) -> None:
    member = signed_in(team.member)
    unlinked = panel(text(member.get(page(calendar))))
    assert "Link the owner's own calendar" in unlinked
    assert "<form" not in unlinked and "An owner or admin of this workspace can link it." in unlinked

    link(calendar, status=ConnectionStatus.ACTIVE)
    linked = panel(text(member.get(page(calendar))))
    assert 'data-state="linked"' in linked and "<form" not in linked
    assert "Sync now" not in linked and "Disconnect" not in linked


def test_a_linked_calendar_shows_where_its_sync_stands(team: Team, calendar: Calendar) -> None:
    synced_at = timezone.now() - timedelta(minutes=3)
    connection = link(
        calendar,
        status=ConnectionStatus.ACTIVE,
        last_synced_at=synced_at,
        sync_lag_seconds=4.25,
        next_sync_at=timezone.now() + timedelta(seconds=90),
    )
    record = IngestionRecord.objects.create(connection=connection, provider="caldav", kind="resource")
    UpstreamEvent.objects.create(connection=connection, resource="/dav/olivia/work/ok.ics", record=record)
    for name in ("broken.ics", "garbled.ics"):
        UpstreamEvent.objects.create(
            connection=connection, resource=f"/dav/olivia/work/{name}", problem="no DTSTART", record=record
        )
    gone = "/dav/olivia/work/gone.ics"
    UpstreamEvent.objects.create(
        connection=connection, resource=gone, problem="no DTSTART", deleted_at=synced_at
    )

    html = panel(text(signed_in(team.owner).get(page(calendar))))

    assert '<span class="pill active" data-testid="connection-status"' in html
    assert "CalDAV" in html and connection.url in html and "olivia" in html
    assert re.search(r'<time datetime="[^"]+" title="[^"]*UTC" data-moment>3m ago</time>', html)
    assert "4.2 s" in html or "4.3 s" in html
    assert re.search(r'data-testid="next-sync"[^>]*>in 2 min<', html)
    assert "2 upstream events could not be read" in html and "broken.ics" in html and "gone.ics" not in html
    assert 'data-testid="connection-error"' not in html
    assert action_url(connection, "sync") in html and action_url(connection, "disconnect") in html
    assert 'data-confirm="Disconnect Sales team from' in html
    assert "never-shown-app-password" not in html and connection.secret not in html


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(-5, "due now"), (0, "due now"), (0.2, "in 1 s"), (59, "in 59 s"), (61, "in 2 min"), (3600, "in 1 h"),
     (3601, "in 1 h 1 min")],
)  # fmt: skip
def test_the_next_sync_is_said_in_words(seconds: float, shown: str) -> None:
    now = datetime(2031, 3, 12, 9, tzinfo=UTC)
    connection = Connection(next_sync_at=now + timedelta(seconds=seconds))
    panel = ConnectionPanel(
        calendar=Calendar(), connection=connection, can_manage=False, now=now, form=ConnectForm()
    )
    assert panel.next_sync == shown


def test_a_pending_link_says_its_first_sync_has_not_run(team: Team, calendar: Calendar) -> None:
    # A new link is due at once; a minute back, as the test's transaction began before it.
    link(calendar, next_sync_at=timezone.now() - timedelta(minutes=1))
    html = panel(text(signed_in(team.member).get(page(calendar))))
    assert '<span class="pill pending" data-testid="connection-status"' in html
    assert re.search(r'data-testid="last-sync"><span class="hint">not yet', html)
    assert re.search(r'data-testid="next-sync"[^>]*>due now', html)


def test_a_failing_link_shows_its_last_error_prominently(team: Team, calendar: Calendar) -> None:
    link(
        calendar,
        status=ConnectionStatus.FAILING,
        last_error=ERROR_DETAIL,
        last_error_at=timezone.now(),
        consecutive_failures=3,
    )
    html = panel(text(signed_in(team.member).get(page(calendar))))
    assert html.startswith('<section class="card connection failing"')
    assert '<span class="pill failing" data-testid="connection-status"' in html
    error = re.search(r'<div class="callout bad" data-testid="connection-error">(.*?)</div>', html, re.S)
    assert error is not None
    assert "Sync is failing" in error.group(1) and "3 attempts in a row" in error.group(1)
    assert ERROR_DETAIL in error.group(1)


def test_a_series_too_costly_to_expand_is_listed_as_blocking_its_whole_span(
    team: Team, calendar: Calendar
) -> None:
    connection = link(calendar, status=ConnectionStatus.ACTIVE)
    why = (
        "expanding RRULE:FREQ=MINUTELY from 2026-12-01 00:00 costs too much; blocking its whole span instead"
    )
    UpstreamEvent.objects.create(connection=connection, resource="minutely.ics", uid="m", warning=why)
    html = panel(text(signed_in(team.member).get(page(calendar))))
    callout = re.search(r'data-testid="connection-whole-span">(.*?)</details>', html, re.S)
    assert callout is not None
    assert "1 upstream series repeats too often to expand" in callout.group(1)
    assert "minutely.ics" in callout.group(1) and "blocking its whole span instead" in callout.group(1)
    assert 'data-testid="connection-unreadable"' not in html, "it is read, and it blocks"


def test_a_linked_panel_polls_itself_and_answers_with_just_the_panel(team: Team, calendar: Calendar) -> None:
    link(calendar, status=ConnectionStatus.ACTIVE)
    client = signed_in(team.member)
    html = text(client.get(page(calendar, view="day", date="2031-03-12")))
    assert re.search(
        r'id="connection-panel"[^>]*\s+hx-get="/w/acme/calendars/cal_\w+\?view=day&amp;date=2031-03-12" '
        r'hx-trigger="every 5s" hx-target="this" hx-swap="outerHTML"',
        html,
    )

    polled = client.get(page(calendar, view="day"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="connection-panel")

    assert polled.status_code == 200
    body = text(polled).strip()
    assert body.startswith('<section class="card connection"') and body.endswith("</section>")
    assert 'data-testid="timeline"' not in body and "<html" not in body


# --- Connecting, against a real CalDAV server ---------------------------------------------------------------


def test_a_wrong_password_is_refused_inline_and_stores_nothing(
    team: Team, calendar: Calendar, caldav_calendar: CalDAVAccount, private_targets: Any
) -> None:
    wrong = "not-the-app-password-1234"
    response = signed_in(team.owner).post(connect_url(calendar), credentials(caldav_calendar, password=wrong))

    assert response.status_code == 400
    html = panel(text(response))
    assert "The CalDAV server refused the username or password." in html
    assert 'data-testid="connect-error"' in html
    # What the person typed comes back, except the password.
    assert f'value="{caldav_calendar.url}"' in html and f'value="{caldav_calendar.username}"' in html
    assert wrong not in text(response)
    assert not Connection.objects.exists()
    assert not AuditRecord.objects.filter(event_type="sync.connection.created").exists()
    assert tables_containing(wrong) == []


def test_an_address_that_is_not_allowed_is_refused_before_any_request(team: Team, calendar: Calendar) -> None:
    # Without SYNC_ALLOW_PRIVATE_TARGETS a loopback address is refused by the URL check itself.
    response = signed_in(team.admin).post(
        connect_url(calendar),
        {"url": "http://127.0.0.1:9/dav/cal/", "username": "x", "password": "pw-123456"},
    )
    assert response.status_code == 400
    assert "The calendar URL cannot be used" in panel(text(response))
    assert not Connection.objects.exists()


def test_the_form_checks_its_fields(team: Team, calendar: Calendar) -> None:
    response = signed_in(team.owner).post(connect_url(calendar), {"url": "not a url", "username": ""})
    assert response.status_code == 400
    html = panel(text(response))
    assert "Enter a valid URL." in html and html.count("This field is required.") == 2
    assert not Connection.objects.exists()


def test_connecting_links_the_calendar(
    team: Team, calendar: Calendar, caldav_calendar: CalDAVAccount, private_targets: Any
) -> None:
    client = signed_in(team.owner)

    response = client.post(connect_url(calendar), credentials(caldav_calendar))

    assert response.status_code == 302 and response["Location"] == page(calendar)
    connection = Connection.objects.get(calendar=calendar)
    assert (connection.provider, connection.url, connection.username) == (
        "caldav",
        caldav_calendar.url,
        caldav_calendar.username,
    )
    assert connection.created_by_user == "olivia@acme.test" and connection.created_by_agent is None
    assert connection.status == ConnectionStatus.PENDING
    assert caldav_calendar.password not in connection.secret
    (created,) = AuditRecord.objects.filter(event_type="sync.connection.created")
    assert created.actor_user == "olivia@acme.test" and created.calendar_public_id == calendar.public_id

    after = text(client.get(response["Location"]))
    assert "Sales team is linked to" in after  # the confirmation, once
    assert 'data-state="linked"' in panel(after)
    assert caldav_calendar.password not in after
    assert "Sales team is linked to" not in text(client.get(page(calendar)))

    # A second submission (a double click, another admin) is refused on the panel of the linked calendar.
    again = client.post(connect_url(calendar), credentials(caldav_calendar))
    assert again.status_code == 400
    assert "is already linked" in panel(text(again)) and 'data-state="linked"' in panel(text(again))
    assert Connection.objects.filter(calendar=calendar).count() == 1


def test_a_synced_event_blocks_the_timeline_and_flags_the_booking_under_it(
    team: Team, calendar: Calendar, caldav_calendar: CalDAVAccount, human: Human, private_targets: Any
) -> None:
    day = future_day(3)
    booking = booking_create(
        actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(14)), title="Demo call"
    )
    client = signed_in(team.owner)
    assert client.post(connect_url(calendar), credentials(caldav_calendar)).status_code == 302
    connection = Connection.objects.get(calendar=calendar)

    def at(hour: int) -> datetime:
        return datetime.combine(day, time(hour), tzinfo=UTC)

    human.put("dentist.ics", ics_event("dentist", summary="Dentist", start=at(9), minutes=60))
    human.put("offsite.ics", ics_event("offsite", summary="Offsite", start=at(14), minutes=60))

    assert connection_sync(connection.pk).outcome == "synced"

    html = text(client.get(page(calendar, view="day", date=day.isoformat())))
    assert '<span class="pill active" data-testid="connection-status"' in panel(html)
    busy = re.findall(r'<div class="block busy[^"]*" data-testid="busy-block" data-source="caldav"', html)
    assert len(busy) == 2
    assert "CalDAV busy" in html and "09:00–10:00" in html
    assert "Dentist" not in html and "Offsite" not in html, "only the busy time is shown, not the event"
    flagged = re.search(rf'data-reservation="{booking.primary.booking_id}"\s+[^>]*>', html)
    assert flagged is not None
    assert 'data-conflict="upstream"' in flagged.group(0)
    assert "overlaps an event in the owner's own calendar" in flagged.group(0)
    assert 'data-testid="conflict-badge"' in html and 'data-testid="conflict-pill"' in html


# --- Sync now and disconnect --------------------------------------------------------------------------------


def test_sync_now_marks_it_due(team: Team, calendar: Calendar) -> None:
    later = timezone.now() + timedelta(hours=1)
    connection = link(calendar, status=ConnectionStatus.ACTIVE, next_sync_at=later)
    client = signed_in(team.admin)

    response = client.post(action_url(connection, "sync"))

    assert response.status_code == 302 and response["Location"] == page(calendar)
    connection.refresh_from_db()
    assert connection.next_sync_at <= timezone.now()
    assert "Sync requested." in text(client.get(response["Location"]))


def test_disconnect_removes_it_and_its_busy_time(team: Team, calendar: Calendar) -> None:
    connection = link(calendar, status=ConnectionStatus.ACTIVE)
    start = datetime.combine(future_day(3), time(9), tzinfo=UTC)
    BusyBlock.objects.create(
        calendar=calendar,
        source="caldav",
        connection_id=connection.pk,
        event_key="dentist",
        start_time=start,
        end_time=start + timedelta(hours=1),
    )
    client = signed_in(team.owner)

    response = client.post(action_url(connection, "disconnect"))

    assert response.status_code == 302 and response["Location"] == page(calendar)
    assert not Connection.objects.exists() and not BusyBlock.objects.exists()
    (deleted,) = AuditRecord.objects.filter(event_type="sync.connection.deleted")
    assert deleted.actor_user == "olivia@acme.test" and deleted.details["connection"] == connection.public_id
    after = text(client.get(response["Location"]))
    assert "is no longer linked" in after and 'data-state="unlinked"' in panel(after)


def test_members_posts_are_refused(team: Team, calendar: Calendar) -> None:
    later = timezone.now() + timedelta(hours=1)
    connection = link(calendar, status=ConnectionStatus.ACTIVE, next_sync_at=later)
    other = make_calendar(team.workspace, "Support")
    member = signed_in(team.member)

    assert member.post(action_url(connection, "sync")).status_code == 403
    assert member.post(action_url(connection, "disconnect")).status_code == 403
    form = {"url": "https://caldav.example.com/x/", "username": "mo", "password": "pw-123456"}
    assert member.post(connect_url(other), form).status_code == 403

    connection.refresh_from_db()
    assert connection.next_sync_at > timezone.now()
    assert Connection.objects.count() == 1 and not AuditRecord.objects.exists()


def test_posts_without_a_csrf_token_are_refused(team: Team, calendar: Calendar) -> None:
    later = timezone.now() + timedelta(hours=1)
    connection = link(calendar, status=ConnectionStatus.ACTIVE, next_sync_at=later)
    owner = signed_in(team.owner, enforce_csrf_checks=True)

    assert owner.post(action_url(connection, "sync")).status_code == 403
    assert owner.post(action_url(connection, "disconnect")).status_code == 403
    form = {"url": "https://caldav.example.com/x/", "username": "o", "password": "pw-123456"}
    assert owner.post(connect_url(make_calendar(team.workspace, "Support")), form).status_code == 403
    assert Connection.objects.count() == 1
    connection.refresh_from_db()
    assert connection.next_sync_at > timezone.now()


def test_another_workspaces_connection_is_404(team: Team, calendar: Calendar) -> None:
    theirs = link(make_calendar(team.other_workspace, "Globex board"), status=ConnectionStatus.ACTIVE)
    owner = signed_in(team.owner)
    for action in ("sync", "disconnect"):
        assert owner.post(f"/w/acme/connections/{theirs.public_id}/{action}").status_code == 404
        assert owner.post(f"/w/globex/connections/{theirs.public_id}/{action}").status_code == 404
    form = {"url": "https://caldav.example.com/x/", "username": "o", "password": "pw-123456"}
    assert owner.post(f"/w/acme/calendars/{theirs.calendar.public_id}/connection", form).status_code == 404
    assert Connection.objects.filter(pk=theirs.pk).exists()


def test_the_actions_take_only_posts(team: Team, calendar: Calendar) -> None:
    connection = link(calendar)
    owner = signed_in(team.owner)
    for path in (action_url(connection, "sync"), action_url(connection, "disconnect"), connect_url(calendar)):
        assert owner.get(path).status_code == 405


# --- The timeline, without a sync ---------------------------------------------------------------------------


def test_busy_time_is_its_own_block_and_an_event_stored_in_pieces_is_one(
    team: Team, calendar: Calendar
) -> None:
    connection = link(calendar, status=ConnectionStatus.ACTIVE)
    day = future_day(3)
    start = datetime.combine(day, time(9), tzinfo=UTC)
    for offset in (0, 1):  # one upstream event stored as two back-to-back pieces
        BusyBlock.objects.create(
            calendar=calendar,
            source="caldav",
            connection_id=connection.pk,
            event_key="workshop",
            start_time=start + timedelta(hours=offset),
            end_time=start + timedelta(hours=offset + 1),
        )

    html = text(signed_in(team.member).get(page(calendar, view="day", date=day.isoformat())))

    (block,) = re.findall(r'<div class="block busy" data-testid="busy-block".*?</div>\s*</div>', html, re.S)
    assert "CalDAV busy" in block and "09:00–11:00" in block
    assert 'data-testid="calendar-empty"' not in html, "busy time is something on the calendar"
    assert "Busy (owner's own calendar)</span>" in html  # the legend


def test_a_flagged_booking_is_marked_only_while_committed(team: Team, calendar: Calendar) -> None:
    day = future_day(3)
    booking = booking_create(actor=actor(team.sdr), calendar=calendar, span=span_on(day, time(10)))
    Reservation.objects.filter(pk=booking.primary.pk).update(upstream_conflict_at=timezone.now())
    client = signed_in(team.member)

    html = text(client.get(page(calendar, view="day", date=day.isoformat())))
    assert 'data-conflict="upstream"' in html and "⚠ overlaps owner's event" in html

    Reservation.objects.filter(pk=booking.primary.pk).update(status="cancelled")
    html = text(client.get(page(calendar, view="day", date=day.isoformat())))
    assert 'data-conflict="upstream"' not in html and 'data-testid="conflict-pill"' not in html


# --- The calendar list and the metrics page -----------------------------------------------------------------


def test_the_list_shows_each_calendars_link(team: Team, calendar: Calendar) -> None:
    link(calendar, status=ConnectionStatus.ACTIVE, last_synced_at=timezone.now())
    failing = make_calendar(team.workspace, "Support")
    link(failing, status=ConnectionStatus.FAILING, last_error=ERROR_DETAIL, last_error_at=timezone.now())
    make_calendar(team.workspace, "Unlinked room")

    html = text(signed_in(team.member).get("/w/acme/calendars"))

    rows = {
        name: row
        for row in html.split('data-testid="calendar-row"')[1:]
        for name in ("Sales team", "Support", "Unlinked room")
        if f">{name}</a>" in row
    }
    assert '<span class="pill active"' in rows["Sales team"]
    assert re.search(r"synced <time [^>]+>0s ago", rows["Sales team"])
    assert '<span class="pill failing"' in rows["Support"] and "failed 0s ago" in rows["Support"]
    assert "not linked" in rows["Unlinked room"] and "pill" not in rows["Unlinked room"].split("upstream")[1]


def test_the_metrics_page_shows_each_links_sync(team: Team, calendar: Calendar) -> None:
    link(calendar, status=ConnectionStatus.ACTIVE, last_synced_at=timezone.now(), sync_lag_seconds=2.5)
    link(
        make_calendar(team.workspace, "Support"),
        status=ConnectionStatus.FAILING,
        sync_lag_seconds=41.0,
        last_error=ERROR_DETAIL,
        last_error_at=timezone.now(),
    )
    link(make_calendar(team.other_workspace, "Globex board"), sync_lag_seconds=999.0)

    html = text(signed_in(team.member).get("/w/acme/metrics"))

    assert "Calendar sync" in html and 'data-testid="sync-empty"' not in html
    rows = re.findall(r'<tr class="clickable" data-testid="sync-row".*?</tr>', html, re.S)
    assert len(rows) == 2
    sales, support = rows
    assert "Sales team" in sales and "CalDAV" in sales and "pill active" in sales and "2.5 s" in sales
    assert "Support" in support and "pill failing" in support and ERROR_DETAIL in support
    assert re.search(r'data-testid="sync-max-lag">41.0 s<', html), "the other workspace's lag is not counted"
    assert re.search(r'data-testid="sync-failing">1<', html)
    assert "Globex board" not in html


def test_the_metrics_page_says_when_nothing_is_linked(team: Team) -> None:
    html = text(signed_in(team.member).get("/w/acme/metrics"))
    empty = re.search(r'data-testid="sync-empty">.*?</div>', html, re.S)
    assert empty is not None
    assert "No calendar is linked to an upstream calendar yet" in empty.group(0)
    assert 'href="/w/acme/calendars"' in empty.group(0)
