from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from workspaces.models import DEFAULT_SCOPES, MAX_PRIORITY, MIN_PRIORITY
from workspaces.services import InvalidScopes, agent_key_bootstrap, parse_scopes


class Command(BaseCommand):
    help = (
        "Create an API key for an agent, creating the workspace and agent when missing. "
        "The raw key is printed alone on the last line (shown once; it is stored only as a hash)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--agent", required=True, help="agent name (its slug is derived from it)")
        parser.add_argument(
            "--scopes",
            default=",".join(DEFAULT_SCOPES),
            help="comma-separated scopes (default: all but bookings:override_rules)",
        )
        parser.add_argument(
            "--priority",
            type=int,
            default=None,
            help="default 100 for a new agent; an existing one keeps its own",
        )
        parser.add_argument("--max-priority", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            scopes = parse_scopes(options["scopes"])
        except InvalidScopes as exc:
            raise CommandError(str(exc)) from exc
        priority, max_priority = options["priority"], options["max_priority"]
        for value in (priority, max_priority):
            if value is not None and not MIN_PRIORITY <= value <= MAX_PRIORITY:
                raise CommandError(f"priorities must be between {MIN_PRIORITY} and {MAX_PRIORITY}")
        if max_priority is not None and priority is not None and max_priority < priority:
            raise CommandError("--max-priority must be at least --priority")
        agent, key, raw = agent_key_bootstrap(
            workspace_slug=options["workspace"],
            agent_name=options["agent"],
            scopes=scopes,
            priority=priority,
            max_priority=max_priority,
        )
        self.stderr.write(
            f"agent {agent.public_id} ({agent.slug}) in workspace {agent.workspace.slug}: "
            f"priority {agent.priority}, max {agent.max_priority}; "
            f"key prefix {key.prefix}; scopes {','.join(key.scopes)}"
        )
        self.stdout.write(raw)
