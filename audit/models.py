"""The append-only audit trail. A database trigger (migration 0002) refuses UPDATE and DELETE."""

from __future__ import annotations

from functools import partial

from django.db import models
from django.db.models.functions import Now

from agentcal.ids import new_public_id


class Outcome(models.TextChoices):
    SUCCESS = "success"
    REJECTED = "rejected"
    FAILED = "failed"  # work of our own that did not succeed (an upstream sync or write)


class AuditRecord(models.Model):
    public_id = models.CharField(max_length=32, default=partial(new_public_id, "aud"), editable=False)
    timestamp = models.DateTimeField(db_default=Now(), db_index=True)
    event_type = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    # Plain columns instead of foreign keys: an audit row must outlive whatever it mentions.
    workspace_id = models.BigIntegerField(null=True)
    agent_public_id = models.CharField(max_length=32, blank=True)
    # The signed-in person who acted in the dashboard, if a person did.
    actor_user = models.CharField(max_length=254, blank=True, db_default="")
    auth_key_prefix = models.CharField(max_length=16, blank=True)
    calendar_public_id = models.CharField(max_length=32, blank=True)
    reservation_public_id = models.CharField(max_length=32, blank=True)
    requested_start = models.DateTimeField(null=True)
    requested_end = models.DateTimeField(null=True)
    http_status = models.PositiveSmallIntegerField(null=True)
    failure_reason = models.CharField(max_length=64, blank=True)
    conflict_details = models.JSONField(null=True)
    fencing_token = models.BigIntegerField(null=True)
    request_id = models.CharField(max_length=64, blank=True)
    details = models.JSONField(default=dict)

    class Meta:
        constraints = [
            # A constraint rather than unique=True: no varchar_pattern_ops copy to update on every write.
            models.UniqueConstraint(fields=["public_id"], name="audit_public_id_unique"),
        ]
        indexes = [
            models.Index(fields=["workspace_id", "-id"], name="audit_workspace_recent"),
            models.Index(fields=["workspace_id", "event_type", "-id"], name="audit_workspace_event"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.event_type} {self.outcome}"
