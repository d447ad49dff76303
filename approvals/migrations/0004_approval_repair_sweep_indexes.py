from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0003_approval_agent_message"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="approval",
            index=models.Index(
                condition=models.Q(
                    ("booking_error", ""),
                    ("booking_id__isnull", True),
                    ("hold_id__isnull", False),
                    ("status", "approved"),
                ),
                fields=["decided_at"],
                name="approval_approved_unsettled",
            ),
        ),
        migrations.AddIndex(
            model_name="approval",
            index=models.Index(
                condition=models.Q(("hold_id__isnull", False)), fields=["hold_id"], name="approval_hold"
            ),
        ),
    ]
