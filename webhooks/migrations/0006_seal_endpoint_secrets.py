"""Webhook endpoints' signing secrets sealed at rest (agentcal.sealing), like the other secrets the server
reads back. The column is renamed so that code still expecting a secret in clear fails loudly instead
of signing with the sealed text."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

# The keyring the running code uses; a migration keeps no copy of the sealing rules.
from agentcal.sealing import SealedSecretUnreadable, seal_secret, unseal_secret

BATCH = 1000


def _rewrite(apps: Any, change: Any) -> None:
    endpoint_model = apps.get_model("webhooks", "WebhookEndpoint")
    last_pk = 0
    while True:
        endpoints = list(
            endpoint_model.objects.filter(pk__gt=last_pk)
            .order_by("pk")
            .only("pk", "public_id", "sealed_secret")[:BATCH]
        )
        if not endpoints:
            return
        for endpoint in endpoints:
            endpoint.sealed_secret = change(endpoint)
        endpoint_model.objects.bulk_update(endpoints, ["sealed_secret"])
        last_pk = endpoints[-1].pk


def seal_existing(apps: Any, schema_editor: Any) -> None:
    _rewrite(apps, lambda endpoint: seal_secret(endpoint.sealed_secret))


def unseal_existing(apps: Any, schema_editor: Any) -> None:
    # Back to clear text, which is what the code before this migration signs with: anything else would
    # have it sign with the sealed text and every delivery fail verification.
    def unseal(endpoint: Any) -> str:
        try:
            return unseal_secret(endpoint.sealed_secret)
        except SealedSecretUnreadable as exc:
            raise RuntimeError(
                f"webhook endpoint {endpoint.public_id}: no key in SYNC_CREDENTIAL_KEYS unseals its "
                "signing secret; configure the key it was sealed with before migrating back"
            ) from exc

    _rewrite(apps, unseal)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0005_booking_attendee_responded_event"),
    ]

    operations = [
        migrations.RenameField(model_name="webhookendpoint", old_name="secret", new_name="sealed_secret"),
        # A sealed 38-character secret is ~140 characters; text has no length to outgrow.
        migrations.AlterField(model_name="webhookendpoint", name="sealed_secret", field=models.TextField()),
        migrations.RunPython(seal_existing, unseal_existing),
    ]
