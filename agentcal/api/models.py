"""Idempotency records for the agent API (Idempotency-Key header)."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from workspaces.models import Agent


class IdempotencyRecord(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # sha256 of the client's Idempotency-Key: the raw key also derives the key that seals the
    # response, so it is never stored.
    key_digest = models.CharField(max_length=64)
    # sha256 of method, path and body: the same key with any other request is `idempotency_key_reused`.
    request_fingerprint = models.CharField(max_length=64)
    # NULL while the first request is still running; set when its response is stored.
    response_status = models.PositiveSmallIntegerField(null=True)
    # The response body, AES-GCM sealed (agentcal.api.idempotency): it can carry secrets shown once
    # (hold_token, a webhook signing secret), and a database reader must not find them here.
    response_sealed = models.BinaryField(null=True)
    response_headers = models.JSONField(default=dict)
    # The database session (pg_backend_pid) of the request running under this claim.
    claimed_by_pid = models.IntegerField(null=True)
    created_at = models.DateTimeField(db_default=Now())
    completed_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            # One claim per (agent, key): the INSERT racing on this constraint decides who runs.
            models.UniqueConstraint(fields=["agent", "key_digest"], name="idempotency_one_claim_per_key"),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.key_digest[:12]}"
