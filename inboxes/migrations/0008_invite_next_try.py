from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inboxes", "0007_attachment_files_in_storage"),
    ]

    operations = [
        migrations.AddField(
            model_name="bookinginvite",
            name="next_try_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        # Rows stored before this are all from outside or (local deliveries) unmarked: false is the
        # safe reading either way, since it only ever withholds trust.
        migrations.AddField(
            model_name="inboundraw",
            name="local_delivery",
            field=models.BooleanField(default=False),
        ),
    ]
