from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_initial"),
    ]

    operations = [
        # Records kept under the raw key can be neither found by digest nor opened: they are only a
        # 24-hour replay cache, so they go (a retry of one of them runs as a new request).
        migrations.RunSQL("DELETE FROM api_idempotencyrecord", migrations.RunSQL.noop),
        migrations.RemoveConstraint(model_name="idempotencyrecord", name="idempotency_one_claim_per_key"),
        migrations.RemoveField(model_name="idempotencyrecord", name="key"),
        migrations.RemoveField(model_name="idempotencyrecord", name="response_body"),
        migrations.AddField(
            model_name="idempotencyrecord",
            name="key_digest",
            field=models.CharField(max_length=64, default=""),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="idempotencyrecord", name="response_sealed", field=models.BinaryField(null=True)
        ),
        migrations.AddField(
            model_name="idempotencyrecord", name="claimed_by_pid", field=models.IntegerField(null=True)
        ),
        migrations.AddConstraint(
            model_name="idempotencyrecord",
            constraint=models.UniqueConstraint(
                fields=("agent", "key_digest"), name="idempotency_one_claim_per_key"
            ),
        ),
    ]
