from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from guardrails.services import agent_pause, agent_resume, workspace_pause, workspace_resume
from workspaces.actor import Actor
from workspaces.models import Agent, Workspace

# How the audit trail names whoever ran the command (no person is signed in).
OPERATOR = "operator (manage.py pause_agents)"


class Command(BaseCommand):
    help = (
        "The emergency stop for scripts: pause a workspace's agents (their writes answer 423, reads still "
        "work), or resume them. Without --agent, the whole workspace."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument(
            "--agent", action="append", default=[], help="agent slug or id (repeat for several)"
        )
        parser.add_argument("--release-holds", action="store_true", help="also release their live holds")
        parser.add_argument("--resume", action="store_true", help="lift the pause instead")

    def handle(self, *args: Any, **options: Any) -> None:
        workspace = Workspace.objects.filter(slug=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace {options['workspace']!r}")
        if options["resume"] and options["release_holds"]:
            raise CommandError("--release-holds goes with a pause, not with --resume")
        actor = Actor(workspace=workspace, agent=None, user_email=OPERATOR)
        names: list[str] = options["agent"]
        if not names:
            if options["resume"]:
                changed = workspace_resume(actor=actor)
                self.stdout.write(f"workspace {workspace.slug}: {'resumed' if changed else 'was not paused'}")
            else:
                stopped = workspace_pause(actor=actor, release_holds=options["release_holds"])
                state = "paused" if stopped.changed else "was already paused"
                self.stdout.write(f"workspace {workspace.slug}: {state}; {stopped.released} holds released")
            return
        for name in names:
            agent = Agent.objects.filter(workspace=workspace, slug=name).first() or (
                Agent.objects.filter(workspace=workspace, public_id=name).first()
            )
            if agent is None:
                raise CommandError(f"no agent {name!r} in workspace {workspace.slug}")
            if options["resume"]:
                changed = agent_resume(actor=actor, agent=agent)
                self.stdout.write(f"agent {agent.slug}: {'resumed' if changed else 'was not paused'}")
            else:
                stopped = agent_pause(actor=actor, agent=agent, release_holds=options["release_holds"])
                state = "paused" if stopped.changed else "was already paused"
                self.stdout.write(f"agent {agent.slug}: {state}; {stopped.released} holds released")
