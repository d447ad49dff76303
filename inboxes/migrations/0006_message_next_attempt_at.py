from django.db import migrations, models
from django.db.models import F


def due_now(apps, schema_editor):
    Message = apps.get_model("inboxes", "Message")
    Message.objects.filter(status="queued").update(next_attempt_at=F("received_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("inboxes", "0005_inbound_webhook_deliveries"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="next_attempt_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RemoveIndex(model_name="message", name="message_queued"),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("status", "queued")),
                fields=["next_attempt_at"],
                name="message_queued_due",
            ),
        ),
        migrations.RunPython(due_now, migrations.RunPython.noop),
    ]
