"""Linking a calendar to Google's or Microsoft's fake as a person would: consent on the fake's page (with
PKCE), exchange the code, pick the calendar, link it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from bookings.models import Calendar
from sync.models import Connection
from sync.oauth import GoogleApp, MicrosoftApp, pkce_pair
from sync.services import connection_create_oauth
from tests.helpers import Persona, create_calendar, iso
from tests.sync.google_fake import DEFAULT_ACCOUNT as GOOGLE_ACCOUNT
from tests.sync.google_fake import GoogleFake
from tests.sync.graph_fake import DEFAULT_ACCOUNT as MICROSOFT_ACCOUNT
from tests.sync.graph_fake import GraphFake
from tests.sync.linking import sync_now
from workspaces.actor import Actor

GOOGLE_CALENDAR = "work-calendar"
OUTLOOK_CALENDAR = "AAMkADcalendar-work="


@dataclass
class GoogleLinked:
    calendar_id: str
    connection_id: str
    pk: int
    fake: GoogleFake


@dataclass
class MicrosoftLinked:
    calendar_id: str
    connection_id: str
    pk: int
    fake: GraphFake


def google_link(persona: Persona, fake: GoogleFake, live_url: str) -> GoogleLinked:
    """Consent on the fake's page (as a browser would), exchange the code with PKCE, link the calendar."""
    fake.add_calendar(GOOGLE_ACCOUNT, GOOGLE_CALENDAR, "Work", primary=True)
    calendar = create_calendar(persona)
    app = GoogleApp()
    verifier, challenge = pkce_pair()
    redirect_uri = f"{live_url}/oauth/google/callback"
    location = fake.consent(
        app.authorization_url(state="s1", code_challenge=challenge, redirect_uri=redirect_uri)
    )
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == ["s1"]
    grant = app.exchange(code=query["code"][0], code_verifier=verifier, redirect_uri=redirect_uri)
    assert [c.id for c in app.calendars(grant.access_token)] == [GOOGLE_CALENDAR]
    model = Calendar.objects.get(public_id=calendar["id"])
    connection = connection_create_oauth(
        actor=Actor(workspace=model.workspace, agent=persona.agent),
        calendar=model,
        provider="google",
        grant=grant,
        remote_calendar_id=GOOGLE_CALENDAR,
        remote_calendar_name="Work",
        account=GOOGLE_ACCOUNT,
    )
    return GoogleLinked(calendar["id"], connection.public_id, connection.pk, fake)


class _ConsentForm(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action, self.fields = "", dict[str, str]()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = {key: value or "" for key, value in attrs}
        if tag == "form":
            self.action = named["action"]
        elif tag == "input":
            self.fields[named["name"]] = named.get("value", "")


def graph_consent(fake: GraphFake, url: str) -> dict[str, str]:
    """Open the consent page and press Accept, as a browser would; the query of the redirect back."""
    with httpx.Client(trust_env=False) as browser:
        page = browser.get(url)
        assert page.status_code == 200, page.text
        form = _ConsentForm()
        form.feed(page.text)
        answer = browser.post(fake.url + form.action, data={**form.fields, "consent": "allow"})
    assert answer.status_code == 302
    return {key: values[0] for key, values in parse_qs(urlsplit(answer.headers["Location"]).query).items()}


def microsoft_link(persona: Persona, fake: GraphFake, live_url: str) -> MicrosoftLinked:
    """Consent on the fake's page, exchange the code with PKCE, pick the calendar, link it."""
    fake.add_calendar(MICROSOFT_ACCOUNT, OUTLOOK_CALENDAR, "Calendar", is_default=True)
    fake.add_calendar(MICROSOFT_ACCOUNT, "AAMkADholidays=", "Holidays", can_edit=False)
    calendar = create_calendar(persona)
    app = MicrosoftApp()
    verifier, challenge = pkce_pair()
    redirect_uri = f"{live_url}/oauth/microsoft/callback"
    query = graph_consent(
        fake, app.authorization_url(state="s1", code_challenge=challenge, redirect_uri=redirect_uri)
    )
    assert query["state"] == "s1"
    grant = app.exchange(code=query["code"], code_verifier=verifier, redirect_uri=redirect_uri)
    # Only calendars our bookings can be written to are offered.
    assert [(c.id, c.primary) for c in app.calendars(grant.access_token)] == [(OUTLOOK_CALENDAR, True)]
    model = Calendar.objects.get(public_id=calendar["id"])
    connection = connection_create_oauth(
        actor=Actor(workspace=model.workspace, agent=persona.agent),
        calendar=model,
        provider="microsoft",
        grant=grant,
        remote_calendar_id=OUTLOOK_CALENDAR,
        remote_calendar_name="Calendar",
        account=MICROSOFT_ACCOUNT,
    )
    return MicrosoftLinked(calendar["id"], connection.public_id, connection.pk, fake)


def google_timed(start: datetime, minutes: int = 60) -> dict[str, Any]:
    """An event's start and end as Google takes them."""
    return {
        "start": {"dateTime": iso(start)},
        "end": {"dateTime": iso(start + timedelta(minutes=minutes))},
    }


def graph_at(moment: datetime) -> dict[str, str]:
    return {"dateTime": moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"), "timeZone": "UTC"}


def graph_timed(start: datetime, minutes: int = 60) -> dict[str, Any]:
    """An event's start and end as Graph takes them."""
    return {"start": graph_at(start), "end": graph_at(start + timedelta(minutes=minutes))}


def synced(linked: GoogleLinked | MicrosoftLinked) -> Any:
    """A sync now, in this process (waiting out a Celery worker's run of the same connection)."""
    return sync_now(linked.pk)


def connection_of(linked: GoogleLinked | MicrosoftLinked) -> Connection:
    return Connection.objects.get(pk=linked.pk)
