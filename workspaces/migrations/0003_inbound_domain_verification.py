# A workspace's own inbound domain is used only once proven by DNS. Domains set before proof was asked for
# were never proven: they become pending (with a fresh token) and the workspace receives at its default
# domain until an owner or admin publishes the TXT record and presses Verify on the Mail setup page.

import secrets

from django.db import migrations, models


def unproven_domains_become_pending(apps, schema_editor):
    Workspace = apps.get_model("workspaces", "Workspace")
    for workspace in Workspace.objects.exclude(inbound_domain="").only("pk", "inbound_domain"):
        Workspace.objects.filter(pk=workspace.pk).update(
            inbound_domain="",
            inbound_domain_pending=workspace.inbound_domain,
            inbound_domain_token=secrets.token_urlsafe(24),
        )


class Migration(migrations.Migration):
    dependencies = [
        ("workspaces", "0002_inbox_settings"),
    ]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="inbound_domain_pending",
            field=models.CharField(blank=True, default="", max_length=253),
        ),
        migrations.AddField(
            model_name="workspace",
            name="inbound_domain_token",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="workspace",
            name="inbound_domain_verified_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(unproven_domains_become_pending, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="workspace",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("inbound_domain", ""), ("inbound_domain_verified_at__isnull", False), _connector="OR"
                ),
                name="workspace_inbound_domain_verified",
            ),
        ),
        migrations.AddConstraint(
            model_name="workspace",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("inbound_domain_pending", ""),
                    models.Q(("inbound_domain_token", ""), _negated=True),
                    _connector="OR",
                ),
                name="workspace_inbound_domain_pending_has_token",
            ),
        ),
    ]
