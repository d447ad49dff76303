from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sync", "0005_upstream_event_warning"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="connection", name="connection_next_sync"),
        migrations.AddIndex(
            model_name="connection",
            index=models.Index(
                condition=models.Q(("status", "revoked"), _negated=True),
                fields=["next_sync_at"],
                name="connection_sync_due",
            ),
        ),
    ]
