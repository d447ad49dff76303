from __future__ import annotations

import django.db.models.fields.json
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0002_evidence_order"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="approval",
            index=models.Index(
                models.F("agent"),
                django.db.models.fields.json.KeyTransform("message", "evidence"),
                models.F("id"),
                condition=models.Q(("hold_id__isnull", True)),
                name="approval_agent_message",
            ),
        ),
    ]
