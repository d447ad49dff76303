from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import migrations, models


def move_into_storage(apps, schema_editor):
    Attachment = apps.get_model("inboxes", "Attachment")
    for row in Attachment.objects.exclude(content=None).iterator(chunk_size=100):
        name = default_storage.save(f"inbox-attachments/{row.public_id}", ContentFile(bytes(row.content)))
        Attachment.objects.filter(pk=row.pk).update(file=name)


class Migration(migrations.Migration):
    dependencies = [
        ("inboxes", "0006_message_next_attempt_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="attachment",
            name="file",
            field=models.FileField(blank=True, max_length=255, upload_to=""),
        ),
        migrations.RunPython(move_into_storage, migrations.RunPython.noop),
        migrations.RemoveField(model_name="attachment", name="content"),
    ]
