"""Tenancy and identity: a workspace owns agents; an agent owns scoped API keys."""

from __future__ import annotations

from datetime import date
from functools import partial

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower

from agentcal.ids import new_public_id

MIN_PRIORITY = 0
MAX_PRIORITY = 1000


class Scope(models.TextChoices):
    CALENDARS_READ = "calendars:read"
    CALENDARS_WRITE = "calendars:write"
    BOOKINGS_READ = "bookings:read"
    BOOKINGS_WRITE = "bookings:write"
    # Holds and commits may pass `ignore_rules` (working hours, buffers, notice): audited when used.
    BOOKINGS_OVERRIDE_RULES = "bookings:override_rules"
    APPROVALS_READ = "approvals:read"
    APPROVALS_WRITE = "approvals:write"
    INBOX_READ = "inbox:read"
    INBOX_SEND = "inbox:send"
    AUDIT_READ = "audit:read"
    WEBHOOKS_WRITE = "webhooks:write"


# Granted only when named: a key made with the defaults cannot pass over the calendars' rules (an agent
# answered `outside_working_hours` must not be able to "fix" it by ignoring them).
ELEVATED_SCOPES = frozenset({Scope.BOOKINGS_OVERRIDE_RULES})
DEFAULT_SCOPES = [scope for scope in Scope.values if scope not in ELEVATED_SCOPES]


class LimitFields(models.Model):
    """An agent's guardrails (workspaces/limits.py resolves them): on an agent, null means the workspace's
    default; on a workspace, the installation's (settings.AGENT_LIMIT_DEFAULTS)."""

    # The request rate, a token bucket: refilled at this many per second, holding at most `burst`.
    limit_requests_per_second = models.FloatField(null=True, blank=True)
    limit_request_burst = models.PositiveIntegerField(null=True, blank=True)
    # Budgets the engine checks exactly, in the write's own transaction.
    limit_live_holds = models.PositiveIntegerField(null=True, blank=True)
    limit_bookings_per_day = models.PositiveIntegerField(null=True, blank=True)
    limit_searches_per_minute = models.PositiveIntegerField(null=True, blank=True)
    # The emergency stop: while set, the agent's writes are refused (423), its reads still answer.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=254, blank=True, default="")

    class Meta:
        abstract = True
        constraints = [
            models.CheckConstraint(
                condition=Q(limit_requests_per_second__isnull=True) | Q(limit_requests_per_second__gt=0),
                name="%(class)s_request_rate_positive",
            ),
            models.CheckConstraint(
                condition=Q(limit_request_burst__isnull=True) | Q(limit_request_burst__gte=1),
                name="%(class)s_request_burst_positive",
            ),
            models.CheckConstraint(
                condition=Q(limit_searches_per_minute__isnull=True) | Q(limit_searches_per_minute__gte=1),
                name="%(class)s_search_rate_positive",
            ),
        ]


class Workspace(LimitFields):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "ws"), editable=False
    )
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    # The tier's audit window: older rows are never returned, whether or not the purge has run.
    audit_retention_days = models.PositiveIntegerField(default=90)
    # The domain of the agents' mail addresses, proven ours by DNS (inboxes.mail_settings); blank means
    # `<slug>.<INBOUND_DOMAIN_SUFFIX>`. Only this one receives mail and signs outgoing mail.
    inbound_domain = models.CharField(max_length=253, blank=True, default="")
    inbound_domain_verified_at = models.DateTimeField(null=True, blank=True)
    # A domain asked for but not yet proven: it takes over `inbound_domain` once `_agentcal.<domain>` has a
    # TXT record `agentcal-verification=<token>`. Several workspaces may ask for the same domain; the
    # first to prove it gets it.
    inbound_domain_pending = models.CharField(max_length=253, blank=True, default="")
    inbound_domain_token = models.CharField(max_length=64, blank=True, default="")
    # The HMAC key of the inbound-mail webhook (sealed like upstream credentials); blank until generated.
    inbound_webhook_secret = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            *LimitFields.Meta.constraints,
            # Mail to a domain must reach exactly one workspace.
            models.UniqueConstraint(
                fields=["inbound_domain"],
                condition=~Q(inbound_domain=""),
                name="workspace_inbound_domain_unique",
            ),
            # A custom domain receives mail only once proven: resolve_recipient trusts `inbound_domain`.
            models.CheckConstraint(
                condition=Q(inbound_domain="") | Q(inbound_domain_verified_at__isnull=False),
                name="workspace_inbound_domain_verified",
            ),
            # The TXT record to look for is known for every pending domain.
            models.CheckConstraint(
                condition=Q(inbound_domain_pending="") | ~Q(inbound_domain_token=""),
                name="workspace_inbound_domain_pending_has_token",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Agent(LimitFields):
    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "agt"), editable=False
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64)
    # `priority` is what the agent's requests carry by default; `max_priority` is the most it may ask
    # for. Both come from here, never from trust in the request.
    priority = models.IntegerField(default=100)
    max_priority = models.IntegerField(default=100)
    is_active = models.BooleanField(default=True)
    # Inbox: with review first, every send waits for a person's approval. The limits are per agent, so one
    # runaway agent exhausts its own quota, not the sending domain's; null means the installation default.
    inbox_review_first = models.BooleanField(default=False)
    inbox_burst_limit = models.PositiveIntegerField(null=True, blank=True)
    inbox_daily_send_limit = models.PositiveIntegerField(null=True, blank=True)
    inbox_daily_recipient_limit = models.PositiveIntegerField(null=True, blank=True)
    inbox_storage_limit_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            *LimitFields.Meta.constraints,
            models.UniqueConstraint(fields=["workspace", "slug"], name="agent_slug_unique_per_workspace"),
            # The slug is the local part of the agent's mail address, which is matched without regard to
            # case: lowercase only, so two agents ("Sales", "sales") can never share an address.
            models.CheckConstraint(condition=Q(slug=Lower("slug")), name="agent_slug_lowercase"),
            models.CheckConstraint(
                condition=Q(priority__gte=MIN_PRIORITY)
                & Q(max_priority__lte=MAX_PRIORITY)
                & Q(max_priority__gte=F("priority")),
                name="agent_priority_within_bounds",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workspace.slug}/{self.slug}"


class ApiKey(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True)
    # Non-secret lookup prefix (the first characters after `avs_live_`), shown in audit rows and UIs.
    prefix = models.CharField(max_length=16, unique=True)
    # argon2id hash of the whole raw key; the raw key is shown once and never stored.
    key_hash = models.CharField(max_length=200)
    scopes = ArrayField(models.CharField(max_length=32, choices=Scope.choices), default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Set when a key is rotated: the old key keeps working until then (grace period).
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"avs_live_{self.prefix}…"


class AgentUsage(models.Model):
    """What an agent's budgets count, one row per agent (made by a trigger when the agent is), updated by
    the engine in the same statement as the write it counts: its row lock orders one agent's budgeted
    writes, so a budget is exact under concurrency (bookings/engine/budgets.py)."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, primary_key=True, related_name="usage")
    # Holds made so far: a write compares it with what its snapshot saw, to count the holds made by
    # writes that committed after its snapshot was taken.
    holds_made = models.BigIntegerField(default=0)
    # Bookings made on `day` (UTC); another day's count is zero.
    day = models.DateField(null=True, blank=True)
    bookings_on_day = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"usage of agent {self.agent_id}"

    def bookings_on(self, day: date) -> int:
        """Bookings made on `day` (UTC): the count is kept for one day at a time."""
        return self.bookings_on_day if self.day == day else 0
