# Agent slugs are the local part of the agents' mail addresses, matched without regard to case: two slugs
# differing only by case ("Sales", "sales") shared one address. Slugs become lowercase, and the database
# keeps them so. Where lowercasing would collide with another agent of the workspace, an agent whose slug
# was already lowercase keeps it, else the oldest of them; the others get the first free "-2", "-3", ...
# suffix, as the dashboard does for a taken slug (and so a new address).

from django.db import migrations, models
from django.db.models.functions import Lower

SLUG_MAX_LENGTH = 64


def lowercase_slugs(apps, schema_editor):
    Agent = apps.get_model("workspaces", "Agent")
    # In id order: of two agents whose slugs differ only by case, the older one keeps the plain slug.
    # PostgreSQL's lower(), not Python's: the constraint added below is checked with it.
    mixed = Agent.objects.exclude(slug=Lower("slug")).order_by("pk")
    for pk, workspace_id, slug in mixed.values_list("pk", "workspace_id", Lower("slug")):
        # Slugs already lowercase are final (those fixed earlier in this loop included); the others all
        # have an upper-case letter, so a lowercase slug can never collide with one of them.
        taken = set(
            Agent.objects.filter(workspace_id=workspace_id, slug=Lower("slug")).values_list("slug", flat=True)
        )
        if slug in taken:
            base = slug[: SLUG_MAX_LENGTH - 4].strip("-") or "agent"
            slug = next(f"{base}-{n}" for n in range(2, len(taken) + 3) if f"{base}-{n}" not in taken)
        Agent.objects.filter(pk=pk).update(slug=slug)


class Migration(migrations.Migration):
    dependencies = [
        ("workspaces", "0003_inbound_domain_verification"),
    ]

    operations = [
        migrations.RunPython(lowercase_slugs, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="agent",
            constraint=models.CheckConstraint(
                condition=models.Q(("slug", Lower("slug"))), name="agent_slug_lowercase"
            ),
        ),
    ]
