from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inboxes", "0010_message_review_unlinked"),
        ("workspaces", "0006_agent_limits_and_pause"),
    ]

    operations = [
        migrations.AlterField(
            model_name="message",
            name="agent",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="workspaces.agent",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("invite_booking_id__isnull", False)),
                fields=["agent", "invite_booking_id"],
                name="message_agent_invite",
            ),
        ),
    ]
