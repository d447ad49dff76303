from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.utils.text import slugify

from agentcal.errors import AgentSlugTaken, InvalidScopes, KeyNotActive, PriorityOutOfBounds
from audit.events import AuditEvent
from audit.models import Outcome
from audit.services import audit_record
from workspaces.actor import Actor
from workspaces.keys import api_key_create, api_keys_changed
from workspaces.models import MAX_PRIORITY, MIN_PRIORITY, Agent, ApiKey, Scope, Workspace


def parse_scopes(raw: str) -> list[str]:
    scopes = [s.strip() for s in raw.split(",") if s.strip()]
    unknown = sorted(set(scopes) - set(Scope.values))
    if unknown:
        raise InvalidScopes(f"unknown scope(s): {', '.join(unknown)}; known: {', '.join(Scope.values)}")
    return scopes


DEFAULT_PRIORITY = 100


@transaction.atomic
def agent_key_bootstrap(
    *, workspace_slug: str, agent_name: str, scopes: list[str], priority: int | None, max_priority: int | None
) -> tuple[Agent, ApiKey, str]:
    """Create the workspace and agent when missing, and a new key for the agent.

    Priorities given are applied (to an existing agent too); priorities not given leave an existing
    agent as it is, so minting a second key never quietly demotes an agent.
    """
    workspace, _ = Workspace.objects.get_or_create(slug=workspace_slug, defaults={"name": workspace_slug})
    agent_slug = slugify(agent_name) or "agent"
    agent = Agent.objects.filter(workspace=workspace, slug=agent_slug).first()
    if agent is None:
        base = DEFAULT_PRIORITY if priority is None else priority
        agent = Agent.objects.create(
            workspace=workspace,
            slug=agent_slug,
            name=agent_name,
            priority=base,
            max_priority=max(base, max_priority if max_priority is not None else base),
        )
    elif priority is not None or max_priority is not None:
        agent.priority = agent.priority if priority is None else priority
        ceiling = agent.max_priority if max_priority is None else max_priority
        agent.max_priority = max(agent.priority, ceiling)
        agent.save(update_fields=["priority", "max_priority"])
    key, raw = api_key_create(agent=agent, scopes=scopes)
    return agent, key, raw


# --- Dashboard administration ---------------------------------------------------------------------------
# A signed-in owner or admin manages agents and keys. Each change and its audit row (actor_user = the
# person) commit together; the agent concerned is named in the row's details, because the row's
# agent_public_id column means "the agent that acted".

MAX_ROTATION_GRACE = timedelta(days=7)
SLUG_MAX_LENGTH = 64


def _check_priorities(priority: int, max_priority: int) -> None:
    # The same rule as the `agent_priority_within_bounds` constraint, checked first for a readable error.
    if not MIN_PRIORITY <= priority <= max_priority <= MAX_PRIORITY:
        raise PriorityOutOfBounds(
            f"Priorities must satisfy {MIN_PRIORITY} ≤ priority ≤ max priority ≤ {MAX_PRIORITY}."
        )


def _free_slug(workspace: Workspace, base: str) -> str:
    base = base[: SLUG_MAX_LENGTH - 4].strip("-") or "agent"
    existing = Agent.objects.filter(workspace=workspace, slug__startswith=base)
    taken = set(existing.values_list("slug", flat=True))
    if base not in taken:
        return base
    return next(f"{base}-{n}" for n in range(2, len(taken) + 3) if f"{base}-{n}" not in taken)


def agent_create(
    *,
    actor: Actor,
    name: str,
    slug: str = "",
    priority: int = DEFAULT_PRIORITY,
    max_priority: int | None = None,
) -> Agent:
    """A blank slug is derived from the name (with a numeric suffix when taken); a slug given explicitly
    must be free, else AgentSlugTaken. Slugs are lowercase (the `agent_slug_lowercase` constraint): the
    slug is the local part of the agent's mail address, which is matched without regard to case."""
    ceiling = priority if max_priority is None else max_priority
    _check_priorities(priority, ceiling)
    slug = slug.lower()
    if slug and Agent.objects.filter(workspace=actor.workspace, slug=slug).exists():
        raise AgentSlugTaken(slug)
    chosen = slug or _free_slug(actor.workspace, slugify(name))
    try:
        return _agent_insert(actor=actor, name=name, slug=chosen, priority=priority, max_priority=ceiling)
    except IntegrityError as exc:  # someone took the slug between the check and the insert
        raise AgentSlugTaken(chosen) from exc


@transaction.atomic(durable=True)
def _agent_insert(*, actor: Actor, name: str, slug: str, priority: int, max_priority: int) -> Agent:
    agent = Agent.objects.create(
        workspace=actor.workspace, name=name, slug=slug, priority=priority, max_priority=max_priority
    )
    audit_record(
        event_type=AuditEvent.AGENT_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={
            "agent_id": agent.public_id,
            "name": name,
            "slug": slug,
            "priority": priority,
            "max_priority": max_priority,
        },
    )
    return agent


@transaction.atomic(durable=True)
def agent_update(*, actor: Actor, agent: Agent, priority: int, max_priority: int) -> Agent:
    """Set the agent's default and maximum priority; audited only when something changed."""
    _check_priorities(priority, max_priority)
    current = Agent.objects.select_for_update().get(pk=agent.pk, workspace=actor.workspace)
    changes = {
        field: [getattr(current, field), value]
        for field, value in (("priority", priority), ("max_priority", max_priority))
        if getattr(current, field) != value
    }
    if not changes:
        return current
    current.priority, current.max_priority = priority, max_priority
    current.save(update_fields=["priority", "max_priority"])
    audit_record(
        event_type=AuditEvent.AGENT_UPDATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={"agent_id": current.public_id, "changes": changes},
    )
    return current


@transaction.atomic(durable=True)
def agent_rename(*, actor: Actor, agent: Agent, name: str) -> Agent:
    """A new display name; the slug (the agent's mail address) stays. Audited only when it changed."""
    current = Agent.objects.select_for_update().get(pk=agent.pk, workspace=actor.workspace)
    if current.name == name:
        return current
    previous, current.name = current.name, name
    current.save(update_fields=["name"])
    audit_record(
        event_type=AuditEvent.AGENT_UPDATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={"agent_id": current.public_id, "changes": {"name": [previous, name]}},
    )
    return current


@transaction.atomic(durable=True)
def agent_set_active(*, actor: Actor, agent: Agent, active: bool) -> tuple[Agent, bool]:
    """Disable or enable an agent; returns it and whether anything changed (audited only then).

    A disabled agent's keys are refused (workspaces.keys checks `is_active` with every key) and mail to
    its address bounces; its holds and bookings stay. A save, not a queryset update: the processes'
    copies of key rows follow saves of the agent (workspaces/keys.py).
    """
    current = Agent.objects.select_for_update().get(pk=agent.pk, workspace=actor.workspace)
    if current.is_active == active:
        return current, False
    current.is_active = active
    current.save(update_fields=["is_active"])
    audit_record(
        event_type=AuditEvent.AGENT_ENABLED if active else AuditEvent.AGENT_DISABLED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={"agent_id": current.public_id, "name": current.name},
    )
    return current, True


def _check_scopes(scopes: list[str]) -> list[str]:
    if not scopes:
        raise InvalidScopes("Choose at least one scope.")
    unknown = sorted(set(scopes) - set(Scope.values))
    if unknown:
        raise InvalidScopes(f"unknown scope(s): {', '.join(unknown)}")
    return sorted(set(scopes))


@transaction.atomic(durable=True)
def api_key_issue(*, actor: Actor, agent: Agent, scopes: list[str], name: str = "") -> tuple[ApiKey, str]:
    """A new key for one of the workspace's agents, and its raw value: show it once, never keep it."""
    scopes = _check_scopes(scopes)
    if agent.workspace_id != actor.workspace.pk:
        raise Agent.DoesNotExist(agent.public_id)
    key, raw = api_key_create(agent=agent, scopes=scopes, name=name)
    audit_record(
        event_type=AuditEvent.API_KEY_CREATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={"agent_id": agent.public_id, "key_prefix": key.prefix, "scopes": scopes, "name": name},
    )
    return key, raw


@transaction.atomic(durable=True)
def api_key_revoke(*, actor: Actor, key: ApiKey) -> ApiKey:
    """Revoke: every process refuses the key within a second (workspaces/keys.py)."""
    revoked = ApiKey.objects.filter(
        pk=key.pk, agent__workspace=actor.workspace, revoked_at__isnull=True
    ).update(revoked_at=Now())
    if revoked != 1:
        raise KeyNotActive(f"Key {key.prefix} is already revoked.")
    api_keys_changed()  # every process stops using its copy of the key row within a second
    key.refresh_from_db(fields=["revoked_at"])
    audit_record(
        event_type=AuditEvent.API_KEY_REVOKED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={"agent_id": key.agent.public_id, "key_prefix": key.prefix},
    )
    return key


@transaction.atomic(durable=True)
def api_key_rotate(*, actor: Actor, key: ApiKey, grace: timedelta) -> tuple[ApiKey, str]:
    """A new key with the same scopes; the old one keeps working for `grace`, then expires.

    Only a key with no expiry yet can be rotated (claimed by a conditional update), so two admins
    rotating at once get one new key, not two.
    """
    if not timedelta(0) < grace <= MAX_ROTATION_GRACE:
        raise ValueError(f"The grace period must be positive and at most {MAX_ROTATION_GRACE}.")
    claimed = ApiKey.objects.filter(
        pk=key.pk, agent__workspace=actor.workspace, revoked_at__isnull=True, expires_at__isnull=True
    ).update(expires_at=Now() + grace)
    if claimed != 1:
        raise KeyNotActive(f"Key {key.prefix} is revoked, expired or already rotated.")
    api_keys_changed()
    key.refresh_from_db(fields=["expires_at"])
    new_key, raw = api_key_create(agent=key.agent, scopes=list(key.scopes), name=key.name)
    audit_record(
        event_type=AuditEvent.API_KEY_ROTATED,
        outcome=Outcome.SUCCESS,
        actor=actor,
        details={
            "agent_id": key.agent.public_id,
            "key_prefix": key.prefix,
            "new_key_prefix": new_key.prefix,
            "scopes": new_key.scopes,
            "grace_seconds": int(grace.total_seconds()),
            "old_key_expires_at": key.expires_at.isoformat() if key.expires_at else None,
        },
    )
    return new_key, raw
