from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inboxes", "0009_message_notes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("approval_id__isnull", True), ("status", "awaiting_approval")),
                fields=["received_at", "id"],
                name="message_review_unlinked",
            ),
        ),
    ]
