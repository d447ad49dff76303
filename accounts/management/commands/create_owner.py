from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_email

from accounts.links import magic_link_issue, magic_link_url
from accounts.people import owner_create


class Command(BaseCommand):
    help = (
        "Create a workspace owner (and the workspace when missing; an existing member becomes an owner) "
        "and print a one-time sign-in link on the last line. The link works once and expires in "
        "MAGIC_LINK_TTL_SECONDS (15 minutes). Owners invite everyone else, with a role, from the "
        "dashboard's Team page."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--workspace-name", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            validate_email(options["email"])
        except ValidationError as exc:
            raise CommandError(f"{options['email']!r} is not an email address") from exc
        membership = owner_create(
            email=options["email"],
            workspace_slug=options["workspace"],
            workspace_name=options["workspace_name"],
        )
        token = magic_link_issue(email=membership.user.email)
        self.stderr.write(
            f"{membership.user.email} owns workspace {membership.workspace.slug}. Sign in with:"
        )
        self.stdout.write(magic_link_url(token))
