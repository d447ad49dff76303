"""Webhook signing secrets at rest: sealed with the project's keyring, never in a database dump; existing
rows sealed by the migration; a key rotation re-seals them; a secret no key opens fails its delivery
visibly instead of signing with anything else."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pgserver
import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from prometheus_client import REGISTRY
from standardwebhooks import Webhook

from agentcal.sealing import seal_secret, unseal_secret
from tests.helpers import Persona, create_calendar, slot
from tests.helpers import test_database_url as child_database_url
from tests.webhooks.helpers import Receiver, wait_until
from webhooks.models import DeliveryAttempt, DeliveryStatus, WebhookDelivery, WebhookEndpoint
from workspaces.models import Workspace

BEFORE = ("webhooks", "0005_booking_attendee_responded_event")


def register(persona: Persona, url: str, **headers: str) -> dict[str, Any]:
    response = persona.client.post(
        "/webhook-endpoints", json={"url": url, "events": ["hold.created"]}, headers=headers
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert body["secret"].startswith("whsec_")  # still shown, once, in clear
    return body


def pg_dump_data() -> bytes:
    """`pg_dump --data-only` of the test database, wherever it runs (the machine's server, or the
    embedded one behind a socket folder). pgserver's own pg_dump (16) reads any server up to 16; the
    machine's may be older than the embedded server it would be asked to read."""
    pg_dump = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
    done = subprocess.run(
        [str(pg_dump), "--data-only", f"--dbname={child_database_url()}"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def secret_bytes(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def test_a_database_dump_holds_no_webhook_signing_secret(sdr: Persona, webhook_settings: Any) -> None:
    created = [
        register(sdr, "http://127.0.0.1:9/a"),
        # The idempotent replay of this answer (which carries the secret) is kept too.
        register(sdr, "http://127.0.0.1:9/b", **{"Idempotency-Key": str(uuid.uuid4())}),
    ]

    dump = pg_dump_data()
    text = dump.decode()

    assert "webhooks_webhookendpoint" in text and all(e["id"] in text for e in created)  # the right database
    assert "whsec_" not in text
    for endpoint in created:
        raw = secret_bytes(endpoint["secret"])
        assert endpoint["secret"].removeprefix("whsec_") not in text
        assert raw not in dump and raw.hex() not in text
        stored = WebhookEndpoint.objects.get(public_id=endpoint["id"]).sealed_secret
        assert unseal_secret(stored) == endpoint["secret"]


def _migrate_to_latest() -> None:
    """Forward past the migration under test to the newest: later tests on this database need its tables."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes("webhooks"))


@pytest.mark.django_db(transaction=True)
def test_the_migration_seals_secrets_stored_in_clear_and_its_reverse_restores_them(sdr: Persona) -> None:
    clear = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    try:
        with connection.cursor() as cursor:  # an endpoint as the old schema stored it
            cursor.execute(
                "INSERT INTO webhooks_webhookendpoint"
                " (public_id, agent_id, url, description, events, secret, created_at, disabled_reason)"
                " VALUES ('whe_old', %s, 'https://agent.example.com/h', '', '{*}', %s, now(), '')",
                [sdr.agent.pk, clear],
            )
    finally:
        _migrate_to_latest()

    sealed = WebhookEndpoint.objects.get(public_id="whe_old").sealed_secret
    assert "whsec_" not in sealed and clear.removeprefix("whsec_") not in sealed
    assert unseal_secret(sealed) == clear

    # Back: the previous code signs with the column as it is, so it gets the secret in clear again.
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT secret FROM webhooks_webhookendpoint WHERE public_id = 'whe_old'")
            assert cursor.fetchone() == (clear,)
    finally:
        _migrate_to_latest()
    assert unseal_secret(WebhookEndpoint.objects.get(public_id="whe_old").sealed_secret) == clear


def rotate(keys: list[str]) -> subprocess.CompletedProcess[str]:
    """The operator's step, in its own process with the keys from the environment."""
    return subprocess.run(
        [sys.executable, "manage.py", "sync", "--rotate-credentials"],
        env={**os.environ, "DATABASE_URL": child_database_url(), "SYNC_CREDENTIAL_KEYS": ",".join(keys)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_key_rotation_reseals_webhook_secrets_and_deliveries_still_verify(
    sdr: Persona, receiver: Receiver, celery_worker: Any, webhook_settings: Any
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    webhook_settings.SYNC_CREDENTIAL_KEYS = [old]
    endpoint = register(sdr, receiver.url)
    before = WebhookEndpoint.objects.get(public_id=endpoint["id"]).sealed_secret
    # The inbound-mail webhook's secret shares the keyring, so the same rotation must carry it over.
    inbound = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    Workspace.objects.filter(pk=sdr.agent.workspace_id).update(inbound_webhook_secret=seal_secret(inbound))

    done = rotate([new, old])
    assert done.returncode == 0, done.stderr
    assert "re-encrypted the signing secrets of 1 webhook endpoint(s)" in done.stdout
    assert "re-encrypted the inbound webhook secrets of 1 workspace(s)" in done.stdout

    webhook_settings.SYNC_CREDENTIAL_KEYS = [new]  # the old key dropped
    after = WebhookEndpoint.objects.get(public_id=endpoint["id"]).sealed_secret
    assert after != before and unseal_secret(after) == endpoint["secret"]
    assert unseal_secret(Workspace.objects.get(pk=sdr.agent.workspace_id).inbound_webhook_secret) == inbound
    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=40)).raise_for_status()
    (request,) = receiver.wait_for(1)
    assert Webhook(endpoint["secret"]).verify(request.body, request.headers)["type"] == "hold.created"


def test_a_rotation_names_what_no_key_opens_and_still_reseals_the_rest(
    sdr: Persona, webhook_settings: Any
) -> None:
    old, new, lost = (Fernet.generate_key().decode() for _ in range(3))
    webhook_settings.SYNC_CREDENTIAL_KEYS = [old]
    readable = register(sdr, "http://127.0.0.1:9/a")
    stranded = register(sdr, "http://127.0.0.1:9/b")
    webhook_settings.SYNC_CREDENTIAL_KEYS = [lost]
    WebhookEndpoint.objects.filter(public_id=stranded["id"]).update(
        sealed_secret=seal_secret(stranded["secret"])
    )
    webhook_settings.SYNC_CREDENTIAL_KEYS = [new, old]

    with pytest.raises(CommandError) as refused:
        call_command("sync", "--rotate-credentials", stdout=StringIO())

    stranded_pk = WebhookEndpoint.objects.get(public_id=stranded["id"]).pk
    assert f"the signing secrets of 1 webhook endpoint(s): [{stranded_pk}]" in str(refused.value)
    webhook_settings.SYNC_CREDENTIAL_KEYS = [new]
    resealed = WebhookEndpoint.objects.get(public_id=readable["id"]).sealed_secret
    assert unseal_secret(resealed) == readable["secret"]


def test_a_secret_no_key_opens_fails_the_delivery_visibly_and_sends_nothing(
    sdr: Persona, receiver: Receiver, celery_worker: Any, webhook_settings: Any
) -> None:
    webhook_settings.SYNC_CREDENTIAL_KEYS = [Fernet.generate_key().decode()]
    webhook_settings.WEBHOOK_RETRY_SCHEDULE = [0]  # one attempt
    endpoint = register(sdr, receiver.url)
    webhook_settings.SYNC_CREDENTIAL_KEYS = [
        Fernet.generate_key().decode()
    ]  # the key it was sealed with is gone
    failures = (
        REGISTRY.get_sample_value("agentcal_webhook_delivery_failures_total", {"reason": "secret_unreadable"})
        or 0.0
    )

    cal = create_calendar(sdr)
    sdr.client.post(f"/calendars/{cal['id']}/holds", json=slot(hours_ahead=41)).raise_for_status()
    delivery = wait_until(lambda: WebhookDelivery.objects.filter(status=DeliveryStatus.FAILED).first())

    assert receiver.requests == []
    (attempt,) = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.status_code is None and attempt.error.startswith("secret_unreadable: ")
    shown = sdr.client.get(f"/webhook-deliveries/{delivery.public_id}").json()
    assert shown["status"] == "failed" and shown["attempts"][0]["error"] == attempt.error
    assert endpoint["id"] == shown["endpoint_id"]
    assert (
        REGISTRY.get_sample_value("agentcal_webhook_delivery_failures_total", {"reason": "secret_unreadable"})
        == failures + 1
    )
