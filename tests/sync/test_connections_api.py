"""The connections API: credentials checked before saving, stored encrypted and never returned;
scopes, workspaces and private addresses enforced; every bad input a problem+json that stores nothing."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.db import DatabaseError, transaction
from django.db import connection as db

from bookings.models import BusyBlock
from sync.credentials import CredentialsUnreadable, reseal, seal, unseal
from sync.models import Connection, IngestionRecord
from sync.services import connection_sync
from tests.helpers import Persona, audit_rows
from tests.sync.linking import hour, link, phone_event, upstream_busy
from tests.sync.radicale import CalDAVAccount, Human


def connect(persona: Persona, calendar_id: str, account: CalDAVAccount, **override: Any) -> Any:
    body = {
        "provider": "caldav",
        "url": account.url,
        "username": account.username,
        "password": account.password,
    }
    return persona.client.post(f"/calendars/{calendar_id}/connections", json={**body, **override})


def test_connect_read_sync_and_disconnect(
    sdr: Persona, caldav_calendar: CalDAVAccount, human: Human, sync_settings: Any, calendar: dict[str, Any]
) -> None:
    response = connect(sdr, calendar["id"], caldav_calendar)
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["id"].startswith("con_") and created["status"] == "pending"
    assert response.headers["Location"] == f"/v1/connections/{created['id']}"
    assert caldav_calendar.password not in response.text and "password" not in created

    stored = Connection.objects.get(public_id=created["id"])
    assert caldav_calendar.password not in stored.secret
    assert unseal(stored.secret) == {"password": caldav_calendar.password}
    assert audit_rows(event_type="sync.connection.created")[0].details["connection"] == created["id"]

    listed = sdr.client.get(f"/calendars/{calendar['id']}/connections").json()["results"]
    assert [c["id"] for c in listed] == [created["id"]]
    assert sdr.client.post(f"/connections/{created['id']}/sync").status_code == 202

    start = hour(30)
    human.put("x.ics", phone_event("x", start))
    assert connection_sync(stored.pk).outcome == "synced"
    detail = sdr.client.get(f"/connections/{created['id']}").json()
    assert detail["status"] == "active" and detail["last_synced_at"] and detail["last_error"] is None
    assert upstream_busy(sdr, calendar["id"], start, hour(31))

    assert connect(sdr, calendar["id"], caldav_calendar).json()["error"] == "connection_exists"

    assert sdr.client.delete(f"/connections/{created['id']}").status_code == 204
    assert upstream_busy(sdr, calendar["id"], start, hour(31)) == [], "unlinking frees the time at once"
    assert not BusyBlock.objects.exists() and not IngestionRecord.objects.exists()
    assert sdr.client.get(f"/connections/{created['id']}").status_code == 404


def test_wrong_password_or_not_a_calendar_stores_nothing(
    sdr: Persona, caldav_calendar: CalDAVAccount, sync_settings: Any, calendar: dict[str, Any]
) -> None:
    wrong = connect(sdr, calendar["id"], caldav_calendar, password="not-it")
    assert wrong.status_code == 422 and wrong.json()["error"] == "upstream_auth_failed"
    assert wrong.headers["Content-Type"].startswith("application/problem+json")
    assert "not-it" not in wrong.text
    root = caldav_calendar.url.split("/", 3)
    not_calendar = connect(
        sdr, calendar["id"], caldav_calendar, url=f"{root[0]}//{root[2]}/{caldav_calendar.username}/"
    )
    assert not_calendar.status_code == 422 and not_calendar.json()["error"] == "upstream_not_a_calendar"
    nobody = connect(sdr, calendar["id"], caldav_calendar, url="http://127.0.0.1:9/cal/")
    assert nobody.status_code == 502 and nobody.json()["error"] == "upstream_unreachable"
    assert not Connection.objects.exists()
    assert len(audit_rows(event_type="sync.connection.rejected")) == 3


@pytest.mark.parametrize(
    "override, error",
    [
        ({"provider": "google"}, "invalid_request"),
        ({"url": "ftp://example.com/cal"}, "unsafe_upstream_url"),
        ({"url": "not a url"}, "unsafe_upstream_url"),
        ({"password": ""}, "invalid_request"),
        ({"extra": 1}, "invalid_request"),
    ],
)
def test_bad_input_is_refused(
    sdr: Persona,
    caldav_calendar: CalDAVAccount,
    sync_settings: Any,
    calendar: dict[str, Any],
    override: Any,
    error: str,
) -> None:
    response = connect(sdr, calendar["id"], caldav_calendar, **override)
    assert response.status_code == 400 and response.json()["error"] == error, response.text
    assert not Connection.objects.exists()


def test_private_addresses_are_refused_unless_allowed(
    sdr: Persona, caldav_calendar: CalDAVAccount, calendar: dict[str, Any], settings: Any
) -> None:
    settings.SYNC_ALLOW_PRIVATE_TARGETS = False
    for url in (
        caldav_calendar.url,
        "https://169.254.169.254/latest/",
        "https://localhost:5232/alice/cal/",
        "http://caldav.example.com/cal/",  # the app password would travel in clear
    ):
        response = connect(sdr, calendar["id"], caldav_calendar, url=url)
        assert response.status_code == 400 and response.json()["error"] == "unsafe_upstream_url", url
    assert not Connection.objects.exists()


def test_scopes_and_workspaces(
    sdr: Persona,
    outsider: Persona,
    make_agent: Any,
    caldav_calendar: CalDAVAccount,
    human: Human,
    sync_settings: Any,
) -> None:
    linked = link(sdr, caldav_calendar, human)
    reader = make_agent("reader", scopes=["calendars:read"])
    assert reader.client.get(f"/connections/{linked.connection_id}").status_code == 200
    for method, path in [
        ("post", f"/connections/{linked.connection_id}/sync"),
        ("delete", f"/connections/{linked.connection_id}"),
        ("post", f"/calendars/{linked.calendar_id}/connections"),
    ]:
        assert getattr(reader.client, method)(path).status_code == 403, path
    for method, path in [
        ("get", f"/connections/{linked.connection_id}"),
        ("post", f"/connections/{linked.connection_id}/sync"),
        ("delete", f"/connections/{linked.connection_id}"),
        ("get", f"/calendars/{linked.calendar_id}/connections"),
    ]:
        assert getattr(outsider.client, method)(path).status_code == 404, path


def test_credentials_rotate_between_keys(settings: Any) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.SYNC_CREDENTIAL_KEYS = [old]
    secret = seal({"password": "s3cret"})
    settings.SYNC_CREDENTIAL_KEYS = [new, old]
    assert unseal(secret) == {"password": "s3cret"}, "the old key still decrypts"
    rotated = reseal(secret)
    settings.SYNC_CREDENTIAL_KEYS = [new]
    assert unseal(rotated) == {"password": "s3cret"}
    with pytest.raises(CredentialsUnreadable):
        unseal(secret)


def test_the_ingestion_log_is_append_only(
    sdr: Persona, caldav_calendar: CalDAVAccount, human: Human, sync_settings: Any
) -> None:
    linked = link(sdr, caldav_calendar, human)
    human.put("a.ics", phone_event("a", hour(30)))
    connection_sync(linked.pk)
    record = IngestionRecord.objects.filter(connection_id=linked.pk).first()
    assert record is not None
    for statement in (
        "UPDATE sync_ingestionrecord SET payload = 'x' WHERE id = %s",
        "DELETE FROM sync_ingestionrecord WHERE id = %s",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), db.cursor() as cursor:
            cursor.execute(statement, [record.pk])
