"""`python manage.py sync con_… [con_…]` / `--due`: run upstream syncs now, in this process (operators,
and a way to sync without a Celery worker). `--replay` rebuilds a connection's blocks from its log;
`--rotate-credentials` re-encrypts every stored credential under the first configured key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sync.credentials import reseal
from sync.ingest import ingestion_replay
from sync.models import Connection
from sync.services import connection_sync, connections_due


class Command(BaseCommand):
    help = "Sync upstream calendar connections now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("connections", nargs="*", help="connection ids (con_…)")
        parser.add_argument("--due", action="store_true", help="every connection whose sync is due")
        parser.add_argument("--replay", action="store_true", help="rebuild blocks from the ingestion log")
        parser.add_argument(
            "--rotate-credentials", action="store_true", help="re-encrypt credentials under the first key"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["rotate_credentials"]:
            count = 0
            for connection in Connection.objects.all():
                Connection.objects.filter(pk=connection.pk).update(secret=reseal(connection.secret))
                count += 1
            self.stdout.write(f"re-encrypted the credentials of {count} connection(s)")
            return
        ids = list(
            Connection.objects.filter(public_id__in=options["connections"]).values_list("pk", "public_id")
        )
        missing = set(options["connections"]) - {public_id for _, public_id in ids}
        if missing:
            raise CommandError(f"no such connection: {', '.join(sorted(missing))}")
        if options["due"]:
            ids += list(Connection.objects.filter(pk__in=connections_due()).values_list("pk", "public_id"))
        for pk, public_id in ids:
            if options["replay"]:
                processed = ingestion_replay(pk)
                self.stdout.write(f"{public_id}: replayed {processed.records if processed else 0} record(s)")
            else:
                run = connection_sync(pk)
                self.stdout.write(f"{public_id}: {run.outcome} {run.error}".rstrip())
