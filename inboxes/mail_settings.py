"""A workspace's mail settings: the domain its agents' addresses live under, and the secret its inbound
webhook is signed with. Changed by owners and admins in the dashboard (or by ops with
`manage.py inbound_webhook_secret`), each change audited in its own transaction.

A domain of the workspace's own is used only once proven by a DNS TXT record; until then the domain in
use keeps receiving the mail. The secret is kept sealed (agentcal.sealing), not hashed: the server reads
it back to verify signatures.

Design: docs/architecture.md, "A workspace's mail settings".
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
from urllib.parse import urlsplit

import dns.exception
import dns.resolver
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from agentcal.errors import AgentCalError
from agentcal.sealing import seal_secret, unseal_secret
from agentcal.text import storable_text
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from inboxes.addresses import workspace_domain
from webhooks.signing import new_signing_secret
from workspaces.actor import Actor
from workspaces.models import Workspace

logger = logging.getLogger(__name__)

# A DNS label (RFC 1123): letters, digits and inner hyphens, 1–63 characters.
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
MAX_DOMAIN_LENGTH = 253
# The proof of a domain: a TXT record under this label holding this prefix and the workspace's token.
VERIFICATION_LABEL = "_agentcal"
VERIFICATION_PREFIX = "agentcal-verification="
# TXT values kept in the audit row of a failed attempt (what was found instead), each cut to this length.
AUDITED_TXT_VALUES = 5
AUDITED_TXT_LENGTH = 120
# The workspace's domain columns, all saved whenever its domain is set or cleared.
_DOMAIN_FIELDS = [
    "inbound_domain",
    "inbound_domain_verified_at",
    "inbound_domain_pending",
    "inbound_domain_token",
]


class InboundDomainInvalid(AgentCalError):
    status, code, title = 400, "invalid_inbound_domain", "The inbound domain is not allowed"


class InboundDomainTaken(AgentCalError):
    status, code, title = 409, "inbound_domain_taken", "Another workspace receives mail at this domain"


class InboundDomainUnverified(AgentCalError):
    status, code, title = 400, "inbound_domain_unverified", "The domain's verification record was not found"


class NoPendingInboundDomain(AgentCalError):
    status, code, title = 409, "no_pending_inbound_domain", "No domain is waiting to be verified"


def default_inbound_domain(workspace: Workspace) -> str:
    return f"{workspace.slug}.{settings.INBOUND_DOMAIN_SUFFIX}".lower()


def normalized_domain(text: str) -> str:
    """The domain as stored: trimmed, without the root's trailing dot, lowercase."""
    return text.strip().rstrip(".").lower()


def verification_record_name(domain: str) -> str:
    return f"{VERIFICATION_LABEL}.{domain}"


def verification_record_value(token: str) -> str:
    return f"{VERIFICATION_PREFIX}{token}"


def inbound_domain_set(*, actor: Actor, domain: str) -> str:
    """Ask for `domain` as the workspace's inbound domain. Returns the domain now waiting for its proof
    (inbound_domain_verify), or "" when there is nothing to prove: blank, or the default domain, goes back
    to the default at once (agents' addresses change with it, and mail to the custom domain is refused
    from then on); the domain already in use stays, and a pending request is dropped."""
    workspace = actor.workspace
    domain = normalized_domain(domain)
    default = default_inbound_domain(workspace)
    requested = "" if domain in ("", default) else domain
    if requested:
        _check_domain(requested)
    with transaction.atomic(durable=True):
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        previous = workspace_domain(locked)
        if not requested or requested == locked.inbound_domain:
            if not requested:
                locked.inbound_domain, locked.inbound_domain_verified_at = "", None
            locked.inbound_domain_pending = locked.inbound_domain_token = ""
            locked.save(update_fields=_DOMAIN_FIELDS)
            if previous != workspace_domain(locked):
                audit_record(
                    event_type=AuditEvent.WORKSPACE_INBOUND_DOMAIN_UPDATED,
                    outcome=Outcome.SUCCESS,
                    actor=actor,
                    details={"from": previous, "to": workspace_domain(locked)},
                )
        else:
            # Another workspace has proven it: asking again would only lead to a failed verification.
            if Workspace.objects.filter(inbound_domain=requested).exclude(pk=workspace.pk).exists():
                raise InboundDomainTaken(f"{requested} already receives another workspace's mail.")
            if locked.inbound_domain_pending != requested:
                # Asking again for the same domain keeps its token: a record already published stays good.
                locked.inbound_domain_pending = requested
                locked.inbound_domain_token = secrets.token_urlsafe(24)
                locked.save(update_fields=["inbound_domain_pending", "inbound_domain_token"])
                audit_record(
                    event_type=AuditEvent.WORKSPACE_INBOUND_DOMAIN_REQUESTED,
                    outcome=Outcome.SUCCESS,
                    actor=actor,
                    details={"domain": requested, "current": previous},
                )
    _copy_domain_fields(locked, onto=workspace)
    return locked.inbound_domain_pending


def inbound_domain_verify(*, actor: Actor) -> str:
    """Look up the pending domain's verification record; when it holds the workspace's token the domain
    becomes the workspace's inbound domain, which is returned. Every attempt is audited, the failed ones
    with what was found instead."""
    workspace = actor.workspace
    current = Workspace.objects.get(pk=workspace.pk)
    domain, token = current.inbound_domain_pending, current.inbound_domain_token
    if not domain:
        raise NoPendingInboundDomain("Enter the domain first; then publish its record and verify it.")
    record_name, expected = verification_record_name(domain), verification_record_value(token)
    found: list[str] = []
    try:
        # Looked up outside any transaction: a slow DNS server must not hold the workspace's row.
        found = txt_values(record_name)
        if expected not in found:
            raise InboundDomainUnverified(
                f"{record_name} has no TXT record {expected!r}"
                + (f" (it has {', '.join(repr(value) for value in found[:3])})." if found else ".")
                + " Publish the record, wait for it to reach your DNS servers, then verify again."
            )
        try:
            with transaction.atomic(durable=True):
                locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
                if (locked.inbound_domain_pending, locked.inbound_domain_token) != (domain, token):
                    raise NoPendingInboundDomain(
                        "The domain was changed while it was being verified; verify the new one."
                    )
                if Workspace.objects.filter(inbound_domain=domain).exclude(pk=workspace.pk).exists():
                    raise InboundDomainTaken(f"{domain} was verified by another workspace first.")
                previous = workspace_domain(locked)
                locked.inbound_domain, locked.inbound_domain_verified_at = domain, Now()
                locked.inbound_domain_pending = locked.inbound_domain_token = ""
                locked.save(update_fields=_DOMAIN_FIELDS)
                audit_record(
                    event_type=AuditEvent.WORKSPACE_INBOUND_DOMAIN_VERIFIED,
                    outcome=Outcome.SUCCESS,
                    actor=actor,
                    details={"from": previous, "to": domain},
                )
        except IntegrityError as exc:
            # Another workspace proved it between the check and the write (workspace_inbound_domain_unique).
            raise InboundDomainTaken(f"{domain} was verified by another workspace first.") from exc
    except AgentCalError as error:
        audit_record(
            event_type=AuditEvent.WORKSPACE_INBOUND_DOMAIN_VERIFY_REJECTED,
            outcome=Outcome.REJECTED,
            actor=actor,
            failure_reason=error.code,
            details={
                "domain": domain,
                "found": [storable_text(value, AUDITED_TXT_LENGTH) for value in found[:AUDITED_TXT_VALUES]],
            },
        )
        raise
    _copy_domain_fields(Workspace.objects.get(pk=workspace.pk), onto=workspace)
    return domain


def txt_values(name: str) -> list[str]:
    """The TXT values at `name` (each record's strings joined, as SPF and DKIM read them); [] when there
    is no such name or no TXT record. Raises InboundDomainUnverified when DNS gives no answer."""
    try:
        answer = _resolver().resolve(name, "TXT", raise_on_no_answer=False)
    except dns.resolver.NXDOMAIN:
        return []
    except dns.exception.DNSException as exc:
        logger.info("could not look up %s: %s", name, exc)
        raise InboundDomainUnverified(
            f"{name} could not be looked up ({storable_text(str(exc), 200) or type(exc).__name__}); "
            "try again in a moment."
        ) from exc
    if answer.rrset is None:
        return []
    return [b"".join(rdata.strings).decode("utf-8", errors="replace") for rdata in answer.rrset]


def _resolver() -> dns.resolver.Resolver:
    server = settings.INBOUND_DOMAIN_DNS_SERVER
    # With a server of our own the system's configuration is not read at all (it may not exist).
    resolver = dns.resolver.Resolver(configure=not server)
    if server:
        host, port = dns_server_address(server)
        resolver.nameservers = [host]
        resolver.port = port
    resolver.timeout = resolver.lifetime = float(settings.INBOUND_DOMAIN_DNS_TIMEOUT_SECONDS)
    return resolver


def dns_server_address(text: str) -> tuple[str, int]:
    """`host`, `host:port` or `[v6 host]:port`, the host an IP address (a resolver's own address cannot
    be looked up); port 53 unless given. Raises ValueError."""
    parts = urlsplit("//" + text.strip())
    host = str(ipaddress.ip_address(parts.hostname or ""))
    return host, parts.port or 53


def _copy_domain_fields(source: Workspace, *, onto: Workspace) -> None:
    onto.inbound_domain = source.inbound_domain
    onto.inbound_domain_verified_at = source.inbound_domain_verified_at
    onto.inbound_domain_pending = source.inbound_domain_pending
    onto.inbound_domain_token = source.inbound_domain_token


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
