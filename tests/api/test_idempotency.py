"""Idempotency-Key: replays, reuse with another body, concurrent retries, per-agent keys, stored 4xx."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier

import psycopg
import pytest
from django.db import connection
from django.db.models.functions import Now

from agentcal.api.idempotency import key_digest, request_fingerprint
from agentcal.api.models import IdempotencyRecord
from agentcal.errors import IdempotencyReplayUnavailable
from bookings.models import Reservation
from tests.helpers import audit_rows, slot


def reservations(calendar_id: str) -> int:
    return Reservation.objects.filter(calendar__public_id=calendar_id).count()


def test_it_replays_the_original_response_for_the_same_key_and_body(sdr, calendar):
    body = {**slot(hours_ahead=30), "title": "Intro call"}
    headers = {"Idempotency-Key": "hold-intro-1"}

    first = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=body, headers=headers)
    second = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=body, headers=headers)

    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    assert second.status_code == 201
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    assert second.headers["Location"] == first.headers["Location"]
    assert second.headers["Content-Type"] == first.headers["Content-Type"] == "application/json"
    assert reservations(calendar["id"]) == 1
    assert len(audit_rows(event_type="calendar.hold.created", calendar_public_id=calendar["id"])) == 1


def test_it_refuses_the_same_key_with_a_different_body(sdr, calendar):
    headers = {"Idempotency-Key": "hold-reused"}
    first = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30), headers=headers)
    assert first.status_code == 201, first.text

    second = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=31), headers=headers)

    assert second.status_code == 422, second.text
    assert second.headers["content-type"] == "application/problem+json"
    assert second.json()["error"] == "idempotency_key_reused"
    assert "Idempotent-Replayed" not in second.headers
    assert reservations(calendar["id"]) == 1


def test_it_refuses_the_same_key_on_another_path(sdr, calendar):
    headers = {"Idempotency-Key": "one-key-two-endpoints"}
    span = slot(hours_ahead=30)
    first = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=span, headers=headers)
    assert first.status_code == 201, first.text

    second = sdr.client.post(f"/calendars/{calendar['id']}/commits", json=span, headers=headers)

    assert second.status_code == 422, second.text
    assert second.json()["error"] == "idempotency_key_reused"
    assert reservations(calendar["id"]) == 1


@pytest.mark.slow
@pytest.mark.concurrency
def test_concurrent_requests_with_one_key_execute_exactly_once(sdr, calendar):
    racers = 8
    body = slot(hours_ahead=40)
    barrier = Barrier(racers)

    def post(_: int):
        with sdr.new_client() as client:
            barrier.wait()  # release all requests together
            return client.post(
                f"/calendars/{calendar['id']}/holds", json=body, headers={"Idempotency-Key": "herd-key"}
            )

    with ThreadPoolExecutor(max_workers=racers) as pool:
        responses = list(pool.map(post, range(racers)))

    assert reservations(calendar["id"]) == 1
    assert len(audit_rows(event_type="calendar.hold.created", calendar_public_id=calendar["id"])) == 1
    executed = [r for r in responses if r.status_code == 201 and "Idempotent-Replayed" not in r.headers]
    assert len(executed) == 1, [(r.status_code, dict(r.headers), r.text) for r in responses]
    original = executed[0].json()
    for response in responses:
        if response is executed[0]:
            continue
        if response.status_code == 201:
            assert response.headers["Idempotent-Replayed"] == "true"
            assert response.json() == original
        else:
            assert response.status_code == 409, response.text
            assert response.headers["content-type"] == "application/problem+json"
            problem = response.json()
            assert problem["error"] == "idempotency_in_progress"
            assert problem["retryable"] is True
            assert response.headers["Retry-After"] == "1"


def test_keys_are_scoped_per_agent(sdr, exec_assistant, calendar):
    body = slot(hours_ahead=30)
    headers = {"Idempotency-Key": "shared-key-string"}

    mine = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=body, headers=headers)
    theirs = exec_assistant.client.post(f"/calendars/{calendar['id']}/holds", json=body, headers=headers)

    assert mine.status_code == 201, mine.text
    assert theirs.status_code == 201, theirs.text
    # The second agent ran its own request: it must never receive the first agent's hold (and hold_token).
    assert "Idempotent-Replayed" not in theirs.headers
    assert theirs.json()["id"] != mine.json()["id"]
    assert theirs.json()["hold_token"] != mine.json()["hold_token"]
    assert theirs.json()["agent_id"] == exec_assistant.id
    assert IdempotencyRecord.objects.filter(key_digest=key_digest("shared-key-string")).count() == 2


def test_it_stores_and_replays_a_4xx_response(sdr, make_agent, calendar):
    rival = make_agent("rival", priority=100)
    span = slot(hours_ahead=30)
    blocker = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=span)
    assert blocker.status_code == 201, blocker.text
    headers = {"Idempotency-Key": "rival-attempt"}

    refused = rival.client.post(f"/calendars/{calendar['id']}/holds", json=span, headers=headers)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"] == "slot_conflict"

    # Free the slot: a replay must still answer the stored 409 instead of running the request again.
    released = sdr.client.request(
        "DELETE", f"/holds/{blocker.json()['id']}", json={"hold_token": blocker.json()["hold_token"]}
    )
    assert released.status_code == 200, released.text

    replayed = rival.client.post(f"/calendars/{calendar['id']}/holds", json=span, headers=headers)

    assert replayed.status_code == 409
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.headers["content-type"] == "application/problem+json"
    assert replayed.json() == refused.json()
    assert Reservation.objects.filter(calendar__public_id=calendar["id"], agent=rival.agent).count() == 0

    fresh = rival.client.post(
        f"/calendars/{calendar['id']}/holds", json=span, headers={"Idempotency-Key": "rival-2"}
    )
    assert fresh.status_code == 201, fresh.text


def test_it_replays_a_delete(sdr, calendar):
    hold = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30)).json()
    headers = {"Idempotency-Key": "release-once"}
    body = {"hold_token": hold["hold_token"]}

    first = sdr.client.request("DELETE", f"/holds/{hold['id']}", json=body, headers=headers)
    second = sdr.client.request("DELETE", f"/holds/{hold['id']}", json=body, headers=headers)

    assert first.status_code == 200, first.text
    assert second.status_code == 200
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    assert second.headers["Content-Type"] == "application/json"
    assert len(audit_rows(event_type="calendar.hold.released", reservation_public_id=hold["id"])) == 1


def test_it_replays_a_patch(sdr, calendar):
    headers = {"Idempotency-Key": "rename-once"}
    first = sdr.client.patch(f"/calendars/{calendar['id']}", json={"name": "Renamed"}, headers=headers)
    second = sdr.client.patch(f"/calendars/{calendar['id']}", json={"name": "Renamed"}, headers=headers)

    assert first.status_code == 200, first.text
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    assert second.headers["Content-Type"] == "application/json"
    assert len(audit_rows(event_type="calendar.updated", calendar_public_id=calendar["id"])) == 1


@pytest.mark.parametrize(
    "key",
    ["has a space", "x" * 256, "tab\there"],
    ids=["space", "too-long", "control-character"],
)
def test_it_refuses_a_malformed_key_and_writes_nothing(sdr, calendar, key):
    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30), headers={"Idempotency-Key": key}
    )

    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["error"] == "invalid_request"
    assert reservations(calendar["id"]) == 0
    assert IdempotencyRecord.objects.count() == 0


def test_a_key_of_255_printable_characters_is_accepted(sdr, calendar):
    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds",
        json=slot(hours_ahead=30),
        headers={"Idempotency-Key": "k" * 255},
    )
    assert response.status_code == 201, response.text


def test_get_requests_ignore_the_header(sdr, calendar):
    # Even a key that would be refused on a POST is ignored on a GET, and reads are never replayed.
    headers = {"Idempotency-Key": "not checked on reads"}
    before = sdr.client.get(f"/calendars/{calendar['id']}", headers=headers)
    renamed = sdr.client.patch(f"/calendars/{calendar['id']}", json={"name": "Board room"})
    after = sdr.client.get(f"/calendars/{calendar['id']}", headers=headers)

    assert before.status_code == 200, before.text
    assert renamed.status_code == 200, renamed.text
    assert after.status_code == 200
    assert "Idempotent-Replayed" not in after.headers
    assert before.json()["name"] == "Shared calendar"
    assert after.json()["name"] == "Board room"
    assert IdempotencyRecord.objects.count() == 0


def test_a_second_request_while_the_first_is_running_is_409_in_progress(sdr, calendar):
    body = slot(hours_ahead=30)
    path = f"/v1/calendars/{calendar['id']}/holds"
    # The claim a still-running first request leaves behind: no response stored yet, its session alive.
    IdempotencyRecord.objects.create(
        agent=sdr.agent,
        key_digest=key_digest("running"),
        request_fingerprint=request_fingerprint(method="POST", path=path, query="", body=body),
        claimed_by_pid=backend_pid(connection),
    )

    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=body, headers={"Idempotency-Key": "running"}
    )

    assert response.status_code == 409, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["error"] == "idempotency_in_progress"
    assert response.json()["retryable"] is True
    assert response.headers["Retry-After"] == "1"
    assert reservations(calendar["id"]) == 0


def test_a_claim_abandoned_by_a_crashed_worker_is_taken_over(sdr, calendar):
    body = slot(hours_ahead=30)
    path = f"/v1/calendars/{calendar['id']}/holds"
    IdempotencyRecord.objects.create(
        agent=sdr.agent,
        key_digest=key_digest("crashed"),
        request_fingerprint=request_fingerprint(method="POST", path=path, query="", body=body),
    )
    IdempotencyRecord.objects.filter(key_digest=key_digest("crashed")).update(
        created_at=Now() - timedelta(minutes=10)
    )

    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=body, headers={"Idempotency-Key": "crashed"}
    )

    assert response.status_code == 201, response.text
    assert "Idempotent-Replayed" not in response.headers
    assert reservations(calendar["id"]) == 1


def test_a_key_is_forgotten_after_24_hours(sdr, calendar):
    headers = {"Idempotency-Key": "yesterday"}
    first = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=30), headers=headers)
    assert first.status_code == 201, first.text
    IdempotencyRecord.objects.filter(key_digest=key_digest("yesterday")).update(
        created_at=Now() - timedelta(hours=24, minutes=1)
    )

    # A different body with the old key is a new request, not `idempotency_key_reused`.
    second = sdr.client.post(f"/calendars/{calendar['id']}/holds", json=slot(hours_ahead=31), headers=headers)

    assert second.status_code == 201, second.text
    assert "Idempotent-Replayed" not in second.headers
    assert reservations(calendar["id"]) == 2


def test_the_stored_replay_keeps_no_secret_in_clear(sdr, calendar):
    key = "secret-at-rest-check"
    first = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(30), headers={"Idempotency-Key": key}
    )
    assert first.status_code == 201, first.text
    hold_token = first.json()["hold_token"]

    with connection.cursor() as cursor:
        cursor.execute("SELECT r::text, encode(r.response_sealed, 'escape') FROM api_idempotencyrecord r")
        [(row_text, sealed_text)] = cursor.fetchall()
    for secret in (hold_token, key):
        assert secret not in row_text and secret not in sealed_text

    replay = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(30), headers={"Idempotency-Key": key}
    )
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()


def test_a_replay_sealed_under_a_rotated_secret_key_still_opens(sdr, calendar, settings):
    key = "rotation"
    first = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=slot(30), headers={"Idempotency-Key": key}
    )
    assert first.status_code == 201, first.text
    record = IdempotencyRecord.objects.get(key_digest=key_digest(key))

    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-secret-key-" + "x" * 40
    assert open_stored(record, key) == first.json()
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(IdempotencyReplayUnavailable):
        open_stored(record, key)


def open_stored(record: IdempotencyRecord, key: str) -> dict:
    from agentcal.api.idempotency import _open

    assert record.response_sealed is not None
    return _open(bytes(record.response_sealed), key=key, record_id=record.pk)


def test_a_claim_whose_database_session_is_gone_is_taken_over_at_once(sdr, calendar):
    body = slot(hours_ahead=30)
    path = f"/v1/calendars/{calendar['id']}/holds"
    with psycopg.connect(**connection.get_connection_params()) as lost:
        lost_pid = lost.info.backend_pid
    IdempotencyRecord.objects.create(
        agent=sdr.agent,
        key_digest=key_digest("connection-lost"),
        request_fingerprint=request_fingerprint(method="POST", path=path, query="", body=body),
        claimed_by_pid=lost_pid,
    )

    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds", json=body, headers={"Idempotency-Key": "connection-lost"}
    )

    assert response.status_code == 201, response.text
    assert reservations(calendar["id"]) == 1


def backend_pid(conn) -> int:
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_method_the_endpoint_lacks_is_405_whatever_its_idempotency_key(sdr):
    for key in ("reused-key", "not a valid key"):
        answer = sdr.client.delete("/calendars", headers={"Idempotency-Key": key})
        assert answer.status_code == 405, answer.text
        assert answer.json()["error"] == "method_not_allowed"
