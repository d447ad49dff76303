"""Idempotency-Key: the same key, agent and request within 24 h gets the original response again.

The claim is an INSERT racing on the unique (agent, key) constraint, committed before the request
runs, so two concurrent requests with one key cannot both run: the loser sees the claim and answers
`409 idempotency_in_progress`. Only responses below 500 are kept; a 5xx releases the claim so the
retry runs for real.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from agentcal.api.models import IdempotencyRecord
from agentcal.errors import IdempotencyInProgress, IdempotencyKeyReused, InvalidRequest
from workspaces.models import Agent

_VALID_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # printable ASCII, no spaces
# Response headers worth replaying (the rest are regenerated per response).
REPLAYED_HEADERS = ("ETag", "Location", "Content-Type")


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: Any
    headers: dict[str, str]


def request_fingerprint(*, method: str, path: str, query: str, body: Any) -> str:
    canonical = json.dumps([method, path, query, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotency_claim(*, agent: Agent, key: str, fingerprint: str) -> int | StoredResponse:
    """Claim `key` for this request (returns the record id) or return the stored response to replay."""
    if not _VALID_KEY.match(key):
        raise InvalidRequest("Idempotency-Key must be 1-255 printable ASCII characters without spaces.")
    ttl = timedelta(seconds=settings.IDEMPOTENCY_TTL_SECONDS)
    stale = timedelta(seconds=settings.IDEMPOTENCY_STALE_CLAIM_SECONDS)
    for _ in range(3):
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO api_idempotencyrecord
                       (agent_id, key, request_fingerprint, response_headers, created_at)
                VALUES (%s, %s, %s, '{}', now())
                ON CONFLICT (agent_id, key) DO NOTHING
                RETURNING id
                """,
                [agent.pk, key, fingerprint],
            )
            row = cursor.fetchone()
        if row is not None:
            return int(row[0])
        existing = (
            IdempotencyRecord.objects.filter(agent=agent, key=key)
            .annotate(db_now=Now())
            .values(
                "id",
                "request_fingerprint",
                "response_status",
                "response_body",
                "response_headers",
                "created_at",
                "db_now",
            )
            .first()
        )
        if existing is None:
            continue  # purged between our INSERT and SELECT: try again
        age = existing["db_now"] - existing["created_at"]
        abandoned = existing["response_status"] is None and age > stale
        if age > ttl or abandoned:
            # Expired, or left "in progress" by a worker that died: take it over, CAS on created_at.
            taken = IdempotencyRecord.objects.filter(
                id=existing["id"], created_at=existing["created_at"]
            ).update(
                request_fingerprint=fingerprint,
                response_status=None,
                response_body=None,
                response_headers={},
                created_at=Now(),
                completed_at=None,
            )
            if taken:
                return int(existing["id"])
            continue
        if existing["request_fingerprint"] != fingerprint:
            raise IdempotencyKeyReused(
                "This Idempotency-Key was already used with a different method, path or body.",
                idempotency_key=key,
            )
        if existing["response_status"] is None:
            raise IdempotencyInProgress(
                "The first request with this Idempotency-Key has not finished; retry shortly.",
                idempotency_key=key,
                retryable=True,
            )
        return StoredResponse(
            existing["response_status"], existing["response_body"], existing["response_headers"]
        )
    raise IdempotencyInProgress("The Idempotency-Key is contended; retry shortly.", retryable=True)


def idempotency_complete(*, record_id: int, status: int, body: Any, headers: dict[str, str]) -> None:
    if status >= 500:
        IdempotencyRecord.objects.filter(id=record_id).delete()
        return
    IdempotencyRecord.objects.filter(id=record_id).update(
        response_status=status, response_body=body, response_headers=headers, completed_at=Now()
    )


def idempotency_purge_expired() -> int:
    cutoff = Now() - timedelta(seconds=settings.IDEMPOTENCY_TTL_SECONDS)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
