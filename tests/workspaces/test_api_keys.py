"""API keys: Bearer auth, revocation, expiry, the verified-key cache, and the raw key never kept."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from tests.helpers import audit_rows
from workspaces.keys import KEY_PREFIX, LOOKUP_PREFIX_LENGTH, api_keys_changed, verified_keys
from workspaces.models import ApiKey


def secret_part(raw: str) -> str:
    """The part of a raw key after `avs_live_<prefix>`: what must never be stored or logged."""
    return raw[len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH :]


def assert_unauthenticated(response) -> dict:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="agentcal"'
    problem = response.json()
    assert problem["error"] == "unauthenticated"
    return problem


def test_a_valid_key_authenticates(sdr):
    response = sdr.client.get("/calendars")
    assert response.status_code == 200, response.text
    assert response.json() == {"results": [], "next_cursor": None}


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Token avs_live_abc",
        "avs_live_abcdefghij" + "x" * 43,
        "Bearer not-a-key",
        "Bearer avs_live_short",
    ],
    ids=["missing", "empty", "bearer-only", "basic", "token-scheme", "no-scheme", "garbage", "too-short"],
)
def test_a_missing_or_malformed_authorization_is_401(anonymous, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    assert_unauthenticated(anonymous.get("/calendars", headers=headers))


def test_the_bearer_scheme_is_case_insensitive(sdr, anonymous):
    response = anonymous.get("/calendars", headers={"Authorization": f"bearer {sdr.raw_key}"})
    assert response.status_code == 200, response.text


def test_a_wrong_secret_with_a_valid_prefix_is_401(sdr, anonymous):
    prefix_part = sdr.raw_key[: len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH]
    forged = prefix_part + "A" * len(secret_part(sdr.raw_key))

    assert_unauthenticated(anonymous.get("/calendars", headers={"Authorization": f"Bearer {forged}"}))
    # Still refused once the real key has been verified and cached.
    assert sdr.client.get("/calendars").status_code == 200
    assert_unauthenticated(anonymous.get("/calendars", headers={"Authorization": f"Bearer {forged}"}))


def test_an_unknown_prefix_is_401(sdr, anonymous):
    forged = KEY_PREFIX + "zzzzzzzzzz" + secret_part(sdr.raw_key)
    assert_unauthenticated(anonymous.get("/calendars", headers={"Authorization": f"Bearer {forged}"}))


def test_a_revoked_key_is_401_even_after_it_was_cached(sdr):
    assert sdr.client.get("/calendars").status_code == 200
    assert verified_keys.matches(sdr.key.pk, verified_keys.digest(sdr.raw_key))

    ApiKey.objects.filter(pk=sdr.key.pk).update(revoked_at=timezone.now())
    api_keys_changed()  # what a change that bypasses save() must say (the services do)

    assert_unauthenticated(sdr.client.get("/calendars"))
    assert_unauthenticated(sdr.client.post("/calendars", json={"name": "after revocation"}))


def test_an_expired_key_is_401(sdr):
    assert sdr.client.get("/calendars").status_code == 200
    ApiKey.objects.filter(pk=sdr.key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    api_keys_changed()

    assert_unauthenticated(sdr.client.get("/calendars"))


def test_key_expiry_is_judged_by_the_database_clock(sdr):
    # Contract: expiry comes from the database clock, never the web worker's wall clock. Here the
    # worker's clock lags two hours behind the database, and the key expired an hour ago by the database.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE workspaces_apikey SET expires_at = now() - interval '1 hour' WHERE id = %s", [sdr.key.pk]
        )
    api_keys_changed()
    with time_machine.travel(timezone.now() - timedelta(hours=2), tick=True):
        response = sdr.client.get("/calendars")

    assert_unauthenticated(response)


def test_a_key_in_its_rotation_grace_period_still_works(sdr):
    ApiKey.objects.filter(pk=sdr.key.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    assert sdr.client.get("/calendars").status_code == 200


def test_a_disabled_agents_key_is_401(sdr):
    assert sdr.client.get("/calendars").status_code == 200
    sdr.agent.is_active = False
    sdr.agent.save(update_fields=["is_active"])

    assert_unauthenticated(sdr.client.get("/calendars"))


def test_after_first_use_verification_uses_the_cache_and_last_used_at_is_set(sdr):
    digest = verified_keys.digest(sdr.raw_key)
    assert not verified_keys.matches(sdr.key.pk, digest)
    assert sdr.key.last_used_at is None

    assert sdr.client.get("/calendars").status_code == 200

    assert verified_keys.matches(sdr.key.pk, digest)
    assert not verified_keys.matches(sdr.key.pk, verified_keys.digest(sdr.raw_key + "x"))
    sdr.key.refresh_from_db()
    assert sdr.key.last_used_at is not None


def test_a_rejected_key_leaves_an_audit_row_with_only_the_prefix(sdr, anonymous):
    forged = sdr.raw_key[: len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH] + "B" * len(secret_part(sdr.raw_key))

    anonymous.get("/calendars", headers={"Authorization": f"Bearer {forged}"})

    (row,) = audit_rows(event_type="auth.rejected", auth_key_prefix=sdr.key.prefix)
    assert row.outcome == "rejected"
    assert row.http_status == 401
    assert row.auth_key_prefix == sdr.key.prefix
    assert row.agent_public_id == ""
    row_text = repr(vars(row))
    assert secret_part(forged) not in row_text
    assert secret_part(sdr.raw_key) not in row_text


def tables_containing(needle: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
        tables = [name for (name,) in cursor.fetchall()]
        assert "workspaces_apikey" in tables and "audit_auditrecord" in tables
        found = []
        for table in tables:
            cursor.execute(
                f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s',  # names come from the catalog
                [f"%{needle}%"],
            )
            if cursor.fetchone()[0]:
                found.append(table)
        return found


def exercise_key(persona, anonymous) -> None:
    """Requests that succeed and fail, with the real key and with a forged one on its prefix."""
    forged = persona.raw_key[: len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH] + "C" * len(
        secret_part(persona.raw_key)
    )
    cal = persona.client.post(
        "/calendars", json={"name": "Leak check"}, headers={"Idempotency-Key": "leak-1"}
    )
    assert cal.status_code == 201, cal.text
    assert persona.client.get("/calendars").status_code == 200
    assert persona.client.get("/calendars/cal_missing").status_code == 404
    assert persona.client.post("/calendars", json={"nope": 1}).status_code == 400
    assert anonymous.get("/calendars", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
    assert anonymous.get("/calendars", headers={"Authorization": persona.raw_key}).status_code == 401
    assert persona.client.get("/audit").status_code == 200


def test_the_raw_key_is_never_stored_in_any_table(sdr, anonymous):
    exercise_key(sdr, anonymous)

    assert tables_containing(sdr.raw_key) == []
    assert tables_containing(secret_part(sdr.raw_key)) == []
    # The scan itself works: the non-secret prefix is stored (keys table and audit rows).
    assert {"workspaces_apikey", "audit_auditrecord"} <= set(tables_containing(sdr.key.prefix))


def test_the_raw_key_is_never_logged(sdr, anonymous, caplog):
    with caplog.at_level(logging.DEBUG):
        exercise_key(sdr, anonymous)

    assert caplog.records, "expected some log output from the requests"
    assert any("rejected API key" in record.getMessage() for record in caplog.records)
    secret = secret_part(sdr.raw_key)
    for record in caplog.records:
        assert secret not in record.getMessage(), record.name
        assert secret not in repr(record.args), record.name
    assert secret not in caplog.text
