"""A workspace's mail settings: the domain its agents' addresses live under, and the secret its inbound
webhook is signed with. Changed by owners and admins in the dashboard (or by ops with
`manage.py inbound_webhook_secret`), each change audited in its own transaction.

The secret is kept sealed (agentcal.sealing): the server must read it back to verify signatures, so a
hash will not do, but a database dump alone must not be enough to forge mail into a workspace.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.db import IntegrityError, transaction

from agentcal.errors import AgentCalError
from agentcal.sealing import seal_secret, unseal_secret
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.addresses import workspace_domain
from webhooks.signing import new_signing_secret
from workspaces.actor import Actor
from workspaces.models import Workspace

# A DNS label (RFC 1123): letters, digits and inner hyphens, 1–63 characters.
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
MAX_DOMAIN_LENGTH = 253


class InboundDomainInvalid(AgentCalError):
    status, code, title = 400, "invalid_inbound_domain", "The inbound domain is not allowed"


class InboundDomainTaken(AgentCalError):
    status, code, title = 409, "inbound_domain_taken", "Another workspace receives mail at this domain"


def default_inbound_domain(workspace: Workspace) -> str:
    return f"{workspace.slug}.{settings.INBOUND_DOMAIN_SUFFIX}".lower()


def normalized_domain(text: str) -> str:
    """The domain as stored: trimmed, without the root's trailing dot, lowercase."""
    return text.strip().rstrip(".").lower()


def inbound_domain_set(*, actor: Actor, domain: str) -> str:
    """Receive the workspace's mail at `domain` (its default domain, or blank, for the default); returns
    the domain now in effect. Agents' addresses change with it at once: mail to the old custom domain
    is refused from now on (the default domain keeps working)."""
    workspace = actor.workspace
    domain = normalized_domain(domain)
    default = default_inbound_domain(workspace)
    stored = "" if domain in ("", default) else domain
    if stored:
        _check_domain(stored)
    try:
        with transaction.atomic(durable=True):
            locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
            previous = workspace_domain(locked)
            if stored and Workspace.objects.filter(inbound_domain=stored).exclude(pk=workspace.pk).exists():
                raise InboundDomainTaken(f"{stored} already receives another workspace's mail.")
            locked.inbound_domain = stored
            locked.save(update_fields=["inbound_domain"])
            if previous != (stored or default):
                audit_record(
                    event_type=AuditEvent.WORKSPACE_INBOUND_DOMAIN_UPDATED,
                    outcome=Outcome.SUCCESS,
                    actor=actor,
                    details={"from": previous, "to": stored or default},
                )
    except IntegrityError as exc:
        # Another workspace claimed it between the check and the write (workspace_inbound_domain_unique).
        raise InboundDomainTaken(f"{stored} already receives another workspace's mail.") from exc
    workspace.inbound_domain = stored
    return stored or default


def _check_domain(domain: str) -> None:
    suffix = settings.INBOUND_DOMAIN_SUFFIX
    labels = domain.split(".")
    if len(domain) > MAX_DOMAIN_LENGTH or len(labels) < 2 or not all(map(_LABEL.fullmatch, labels)):
        raise InboundDomainInvalid(
            "Enter a host name such as mail.example.com: letters, digits and hyphens, dot-separated "
            "(internationalised names in their xn-- form)."
        )
    if labels[-1].isdigit():
        raise InboundDomainInvalid("Enter a host name, not an IP address.")
    if domain == suffix or domain.endswith("." + suffix):
        # Those names are other workspaces' default domains (`<slug>.<suffix>`), or could become one.
        raise InboundDomainInvalid(
            f"Names under {suffix} are reserved; only this workspace's own default is."
        )


def inbound_webhook_secret(workspace: Workspace) -> str | None:
    """The secret the workspace's inbound webhook is signed with; None until one is generated."""
    if not workspace.inbound_webhook_secret:
        return None
    return unseal_secret(workspace.inbound_webhook_secret)


def inbound_webhook_secret_issue(*, workspace: Workspace, actor: Actor | None, by: str = "") -> str:
    """A new signing secret for the workspace's inbound webhook, replacing the old one at once; returns it
    (the one time it is shown). `actor` is the person in the dashboard; `by` names another origin
    (a management command) for the audit row."""
    secret = new_signing_secret()
    with transaction.atomic(durable=True):
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        rotated = bool(locked.inbound_webhook_secret)
        locked.inbound_webhook_secret = seal_secret(secret)
        locked.save(update_fields=["inbound_webhook_secret"])
        audit_record(
            event_type=AuditEvent.WORKSPACE_INBOUND_SECRET_ROTATED
            if rotated
            else AuditEvent.WORKSPACE_INBOUND_SECRET_CREATED,
            outcome=Outcome.SUCCESS,
            actor=actor,
            workspace_id=workspace.pk,
            details={"by": by} if by else {},
        )
    workspace.inbound_webhook_secret = locked.inbound_webhook_secret
    return secret
