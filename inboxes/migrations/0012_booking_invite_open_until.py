from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inboxes", "0011_message_agent_invite"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="bookinginvite", name="booking_invite_open"),
        migrations.AddIndex(
            model_name="bookinginvite",
            index=models.Index(
                condition=models.Q(("cancelled_at__isnull", True)),
                fields=["end_time"],
                name="booking_invite_open_until",
            ),
        ),
    ]
