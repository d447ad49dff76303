"""Upstream calendar connections, the append-only ingestion log, and what was processed from it.

The flow (docs/architecture.md, "Upstream sync"): a sync fetches changes from the provider and writes
each raw payload to the log first (IngestionRecord), committing the provider's new sync token with
them; processing then reads the log past the connection's `processed_through`, folds each record into
the per-resource state (UpstreamEvent: newest version wins, deletions tombstone) and replaces the
calendar's busy blocks (bookings.engine.upstream) in one transaction that also advances
`processed_through`. A crash anywhere loses nothing: unfetched changes are fetched again (the token
did not move), unprocessed records are processed by the next run.
"""

from __future__ import annotations

from functools import partial

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from agentcal.ids import new_public_id
from bookings.models import Calendar, UpstreamSource
from workspaces.models import Agent, Workspace

Provider = UpstreamSource


class ConnectionStatus(models.TextChoices):
    PENDING = "pending"  # created; the first sync has not finished yet
    ACTIVE = "active"  # the last sync succeeded
    FAILING = "failing"  # the last sync or an upstream write failed; retrying with backoff
    # The provider no longer honours the grant (revoked, password changed): nothing is retried until
    # someone connects again.
    REVOKED = "revoked"


class Connection(models.Model):
    """A calendar's link to one upstream calendar, and where its sync stands."""

    public_id = models.CharField(
        max_length=32, unique=True, default=partial(new_public_id, "con"), editable=False
    )
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    calendar = models.OneToOneField(Calendar, on_delete=models.CASCADE, related_name="upstream_connection")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    # CalDAV: the calendar collection's URL. OAuth providers: the account, and the calendar picked in it.
    url = models.URLField(max_length=2048, blank=True)
    username = models.CharField(max_length=320, blank=True)
    remote_calendar_id = models.CharField(max_length=1024, blank=True)
    remote_calendar_name = models.CharField(max_length=400, blank=True)
    # The credentials (a password; OAuth tokens and their expiry), Fernet-encrypted (sync.credentials):
    # never returned, never logged.
    secret = models.TextField()
    # Who connected it: an agent through the API, or a signed-in person in the dashboard.
    created_by_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_user = models.CharField(max_length=254, blank=True)
    status = models.CharField(
        max_length=16, choices=ConnectionStatus.choices, default=ConnectionStatus.PENDING
    )
    # The provider's change markers: RFC 6578 sync token (or the collection's ctag when the server has
    # no sync-collection), stored with the records they produced.
    sync_token = models.TextField(blank=True)
    ctag = models.TextField(blank=True)
    supports_sync = models.BooleanField(default=True)
    # The last ingestion record folded into the blocks; processing resumes after it.
    processed_through = models.BigIntegerField(default=0)
    next_sync_at = models.DateTimeField(db_default=Now())
    last_synced_at = models.DateTimeField(null=True, blank=True)
    sync_lag_seconds = models.FloatField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    # The lease of the sync run in progress (at most one per connection; a killed run's lease lapses).
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_token = models.CharField(max_length=32, blank=True)
    # Push: the provider's channel (Google) or subscription (Microsoft) telling us to sync, and the
    # sha256 of the secret it must present on every notification.
    push_id = models.CharField(max_length=256, blank=True)
    push_resource_id = models.CharField(max_length=256, blank=True)
    push_secret_hash = models.CharField(max_length=64, blank=True)
    push_expires_at = models.DateTimeField(null=True, blank=True)
    last_push_at = models.DateTimeField(null=True, blank=True)
    # When push could not be set up (the provider cannot reach us), it is not tried again before this.
    push_retry_at = models.DateTimeField(null=True, blank=True)
    # The latest problems ({"at", "error"}, newest first, a few): the dashboard's "recent errors".
    recent_errors = models.JSONField(default=list, blank=True)
    # Provider quota answers (429, rateLimitExceeded) seen, for the dashboard.
    throttled_count = models.PositiveIntegerField(default=0)
    throttled_streak = models.PositiveIntegerField(default=0)
    # The horizon the blocks were last expanded to (recurring events re-expand as it rolls on).
    expanded_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            # The scheduler's claim (connections_due): revoked connections never sync again, and their
            # next_sync_at stays in the past for good, so they are left out of the index it reads.
            models.Index(
                fields=["next_sync_at"],
                condition=~Q(status=ConnectionStatus.REVOKED),
                name="connection_sync_due",
            )
        ]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.provider})"


class RecordKind(models.TextChoices):
    RESOURCE = "resource"  # one upstream event's raw data, as fetched
    DELETED = "deleted"  # the provider says this resource is gone
    # A full listing's membership (JSON list of every resource key present): processing tombstones
    # the connection's events not in it. Written by a first sync, a full resync after a stale token,
    # and the ctag/etag fallback.
    SNAPSHOT = "snapshot"


class IngestionRecord(models.Model):
    """The append-only log of raw upstream payloads: written before anything is processed, never
    updated; deleted only by the retention purge (or with its connection). The database enforces it
    (migration 0002's trigger), like the audit table."""

    id = models.BigAutoField(primary_key=True)
    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+", db_index=False)
    provider = models.CharField(max_length=16, choices=Provider.choices)
    kind = models.CharField(max_length=16, choices=RecordKind.choices)
    received_at = models.DateTimeField(db_default=Now())
    # The resource within the upstream calendar (a CalDAV href), and the provider's version markers.
    resource = models.CharField(max_length=2048, blank=True)
    etag = models.CharField(max_length=512, blank=True)
    uid = models.CharField(max_length=1024, blank=True)
    sequence = models.IntegerField(null=True, blank=True)
    modified = models.DateTimeField(null=True, blank=True)
    payload = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["connection", "id"], name="ingestion_connection_id")]

    def __str__(self) -> str:
        return f"{self.kind} {self.resource}"


class UpstreamEvent(models.Model):
    """One upstream resource as processed from the log: the version applied, and the record holding
    its data. A deletion leaves a tombstone (`deleted_at`) so an older copy arriving late cannot bring
    it back."""

    connection = models.ForeignKey(
        Connection, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    resource = models.CharField(max_length=2048)
    uid = models.CharField(max_length=1024, blank=True)
    etag = models.CharField(max_length=512, blank=True)
    sequence = models.IntegerField(default=0)
    modified = models.DateTimeField(null=True, blank=True)
    record = models.ForeignKey(IngestionRecord, null=True, on_delete=models.SET_NULL, related_name="+")
    # Set when the resource is the echo of one of our own bookings (written upstream by write-behind).
    booking_id = models.CharField(max_length=32, blank=True)
    recurring = models.BooleanField(default=False)
    # Why it does not block, if it does not (unparsable data): shown on the dashboard, never silent.
    problem = models.TextField(blank=True)
    # Why it blocks more than its own occurrences, if it does: its recurrence was too costly to expand
    # (sync.ical.ExpansionCutShort), so the series' whole span blocks. Shown on the dashboard.
    warning = models.TextField(blank=True, default="")
    deleted_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["connection", "resource"], name="upstream_event_one_per_resource")
        ]

    def __str__(self) -> str:
        return self.resource


class UpstreamCopy(models.Model):
    """One of our committed bookings as written to the upstream calendar (write-behind): what is there
    now, so a change is written once and a cancellation removes it."""

    connection = models.ForeignKey(
        Connection, on_delete=models.CASCADE, related_name="copies", db_index=False
    )
    booking_id = models.CharField(max_length=32)
    resource_name = models.CharField(max_length=256)
    etag = models.CharField(max_length=512, blank=True)
    # The booking's state as written (start, end, title): rewritten when it differs.
    fingerprint = models.CharField(max_length=64)
    sequence = models.IntegerField(default=0)
    written_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["connection", "booking_id"], name="upstream_copy_one_per_booking"
            ),
        ]

    def __str__(self) -> str:
        return self.resource_name
