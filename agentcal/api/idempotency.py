"""Idempotency-Key: the same key, agent and request within 24 h gets the original response again.

The claim is an INSERT racing on the unique (agent, key digest) constraint, committed before the
request runs, so two requests with one key cannot both run (the loser: `409 idempotency_in_progress`).
Only responses below 500 are kept; a 5xx releases the claim. The stored response is sealed under a key
derived from SECRET_KEY and the raw Idempotency-Key, so the database alone cannot open it.

Design: docs/architecture.md, "Idempotency".
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from agentcal.api.models import IdempotencyRecord
from agentcal.errors import (
    IdempotencyInProgress,
    IdempotencyKeyReused,
    IdempotencyReplayUnavailable,
    InvalidRequest,
)
from workspaces.models import Agent

_VALID_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # printable ASCII, no spaces
# Response headers worth replaying (the rest are regenerated per response).
# Content-Type is not among them: until DRF renders the answer, the header holds Django's default
# (text/html). A type the view chose itself (problem+json) is kept apart; otherwise the replay is
# rendered as the original was.
REPLAYED_HEADERS = ("ETag", "Location")
COMPLETE_WITHIN_SECONDS = 3.0
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: Any
    headers: dict[str, str]


def request_fingerprint(*, method: str, path: str, query: str, body: Any) -> str:
    canonical = json.dumps([method, path, query, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _sealing_keys(key: str) -> list[bytes]:
    """The current sealing key first, then those of SECRET_KEY_FALLBACKS (records sealed before a
    rotation stay readable for their 24 hours)."""
    return [
        hmac.new(str(secret).encode(), b"agentcal.idempotency\0" + key.encode(), hashlib.sha256).digest()
        for secret in [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    ]


def _seal(body: Any, *, key: str, record_id: int) -> bytes:
    nonce = secrets.token_bytes(12)
    plaintext = json.dumps(body, separators=(",", ":")).encode()
    return nonce + AESGCM(_sealing_keys(key)[0]).encrypt(nonce, plaintext, str(record_id).encode())


def _open(sealed: bytes, *, key: str, record_id: int) -> Any:
    nonce, ciphertext = sealed[:12], sealed[12:]
    for sealing_key in _sealing_keys(key):
        try:
            plaintext = AESGCM(sealing_key).decrypt(nonce, ciphertext, str(record_id).encode())
        except InvalidTag:
            continue
        return json.loads(plaintext)
    raise IdempotencyReplayUnavailable(
        "The response stored for this Idempotency-Key can no longer be opened (the server's secret key "
        "changed); the first request did run. Read the resource's state before retrying with a new key.",
        retryable=False,
    )


# Is the database session that claimed the key still there? A request whose connection was lost (a
# restart, a failover, a killed backend) cannot release its claim, and its session is gone: the retry
# may take over at once instead of waiting out IDEMPOTENCY_STALE_CLAIM_SECONDS. `backend_start` rules
# out a later session that happens to reuse the pid. (Behind a transaction-mode pooler the pid is a
# shared server session that stays alive, so only the stale timeout applies there.)
_CLAIMANT_ALIVE = RawSQL(
    """EXISTS (SELECT 1 FROM pg_stat_activity a
                WHERE a.pid = api_idempotencyrecord.claimed_by_pid
                  AND a.backend_start <= api_idempotencyrecord.created_at)""",
    [],
    output_field=BooleanField(),
)


def idempotency_claim(*, agent: Agent, key: str, fingerprint: str) -> int | StoredResponse:
    """Claim `key` for this request (returns the record id) or return the stored response to replay."""
    if not _VALID_KEY.match(key):
        raise InvalidRequest("Idempotency-Key must be 1-255 printable ASCII characters without spaces.")
    ttl = timedelta(seconds=settings.IDEMPOTENCY_TTL_SECONDS)
    stale = timedelta(seconds=settings.IDEMPOTENCY_STALE_CLAIM_SECONDS)
    digest = key_digest(key)
    for _ in range(3):
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO api_idempotencyrecord
                       (agent_id, key_digest, request_fingerprint, response_headers, created_at,
                        claimed_by_pid)
                VALUES (%s, %s, %s, '{}', now(), pg_backend_pid())
                ON CONFLICT (agent_id, key_digest) DO NOTHING
                RETURNING id
                """,
                [agent.pk, digest, fingerprint],
            )
            row = cursor.fetchone()
        if row is not None:
            return int(row[0])
        existing = (
            IdempotencyRecord.objects.filter(agent=agent, key_digest=digest)
            .annotate(db_now=Now(), claimant_alive=_CLAIMANT_ALIVE)
            .values(
                "id",
                "request_fingerprint",
                "response_status",
                "response_sealed",
                "response_headers",
                "created_at",
                "db_now",
                "claimant_alive",
            )
            .first()
        )
        if existing is None:
            continue  # purged between our INSERT and SELECT: try again
        age = existing["db_now"] - existing["created_at"]
        abandoned = existing["response_status"] is None and (age > stale or not existing["claimant_alive"])
        if age > ttl or abandoned:
            # Expired, or left "in progress" by a request whose connection or worker died: take it
            # over, CAS on created_at.
            taken = IdempotencyRecord.objects.filter(
                id=existing["id"], created_at=existing["created_at"]
            ).update(
                request_fingerprint=fingerprint,
                response_status=None,
                response_sealed=None,
                response_headers={},
                created_at=Now(),
                completed_at=None,
                claimed_by_pid=RawSQL("pg_backend_pid()", []),
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
        sealed = existing["response_sealed"]
        body = None if sealed is None else _open(bytes(sealed), key=key, record_id=existing["id"])
        return StoredResponse(existing["response_status"], body, existing["response_headers"])
    raise IdempotencyInProgress("The Idempotency-Key is contended; retry shortly.", retryable=True)


def idempotency_release(*, record_id: int) -> None:
    """Forget a claim whose request did not finish (5xx): the retry runs for real."""
    IdempotencyRecord.objects.filter(id=record_id).delete()


def idempotency_complete(
    *, record_id: int, key: str, status: int, body: Any, headers: dict[str, str]
) -> None:
    """Keep the answer of a request whose write has committed, for replays.

    A connection lost just now must not turn that success into an error the agent would believe: the
    answer is stored over fresh connections, backing off, for up to COMPLETE_WITHIN_SECONDS (a database
    restart's blip). If the database stays away the agent still gets its answer, but the claim is left
    unanswered with its claimant's backend gone, so a retry with the key runs the request again.
    """
    sealed = None if body is None else _seal(body, key=key, record_id=record_id)
    deadline = time.monotonic() + COMPLETE_WITHIN_SECONDS
    pause = 0.05
    while True:
        try:
            IdempotencyRecord.objects.filter(id=record_id).update(
                response_status=status, response_sealed=sealed, response_headers=headers, completed_at=Now()
            )
            return
        except (OperationalError, InterfaceError) as exc:
            connection.close()
            if time.monotonic() + pause > deadline:
                logger.error("could not store the answer of idempotency claim %s: %s", record_id, exc)
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def idempotency_purge_expired() -> int:
    cutoff = Now() - timedelta(seconds=settings.IDEMPOTENCY_TTL_SECONDS)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
