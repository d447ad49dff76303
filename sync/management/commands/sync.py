"""`python manage.py sync con_… [con_…]` / `--due`: run upstream syncs now, in this process (operators,
and a way to sync without a Celery worker). `--replay` rebuilds a connection's blocks from its log;
`--rotate-credentials` re-encrypts every secret sealed with the keyring (agentcal.sealing: upstream
credentials, webhook endpoints' signing secrets, inbound-mail webhook secrets) under the first configured
key, so the old key can then be dropped."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentcal.sealing import Resealed, reseal_column
from sync.ingest import ingestion_replay
from sync.models import Connection
from sync.services import connection_sync, connections_due
from webhooks.services import endpoint_secrets_reseal
from workspaces.models import Workspace


class Command(BaseCommand):
    help = "Sync upstream calendar connections now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("connections", nargs="*", help="connection ids (con_…)")
        parser.add_argument("--due", action="store_true", help="every connection whose sync is due")
        parser.add_argument("--replay", action="store_true", help="rebuild blocks from the ingestion log")
        parser.add_argument(
            "--rotate-credentials",
            action="store_true",
            help="re-encrypt every sealed secret (credentials, webhook secrets) under the first key",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["rotate_credentials"]:
            self._rotate()
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

    def _rotate(self) -> None:
        # Every column sealed with the keyring: a secret left under the old key would be lost (a
        # connection broken, an endpoint's deliveries failing) the moment that key is dropped.
        results: list[tuple[str, Resealed]] = [
            ("the credentials of {} connection(s)", reseal_column(Connection.objects.all(), "secret")),
            ("the signing secrets of {} webhook endpoint(s)", endpoint_secrets_reseal()),
            (
                "the inbound webhook secrets of {} workspace(s)",
                reseal_column(Workspace.objects.all(), "inbound_webhook_secret"),
            ),
        ]
        for what, resealed in results:
            self.stdout.write("re-encrypted " + what.format(resealed.count))
        unreadable = [
            f"{what.format(len(r.unreadable))}: {r.unreadable}" for what, r in results if r.unreadable
        ]
        if unreadable:
            # The others are done; these were sealed under a key no longer configured. Keep the old
            # keys until they are dealt with (put the key they were sealed with back, rotate again).
            raise CommandError("no configured key unseals " + "; ".join(unreadable))
