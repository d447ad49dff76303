"""Keep each approval's evidence in the agent's own key order (jsonb sorts an object's keys).

Approvals made before this keep an empty `evidence_json`: their original order is gone, and they are
shown in jsonb's order.
"""

import django.db.models.functions.comparison
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="approval",
            name="evidence_json",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddConstraint(
            model_name="approval",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("evidence_json", ""),
                    (
                        "evidence",
                        django.db.models.functions.comparison.Cast("evidence_json", models.JSONField()),
                    ),
                    _connector="OR",
                ),
                name="approval_evidence_json_matches",
            ),
        ),
    ]
