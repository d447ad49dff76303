"""API keys: `avs_live_` + a 10-character lookup prefix + 32 random bytes (url-safe base64).

Stored as an argon2id hash and found by the non-secret prefix. After one argon2 verification each
process compares an HMAC of the raw key in constant time; the raw key is never stored, cached or
logged. The key row comes from a per-process copy (agentcal.local_cache), so a revocation reaches
every process within a second. A wrong secret costs less than a right one: a refused secret is
refused again without argon2, and failures have a budget per peer (429 before argon2).

Design: docs/architecture.md, "API keys".
"""

from __future__ import annotations

import hmac
import math
import secrets
import string
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError
from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.db.models.functions import Now

from agentcal.db import copy_of
from agentcal.errors import InvalidKey, WrongKeysRateLimited
from agentcal.local_cache import LocalCache, rows_changed
from agentcal.metrics import KEY_VERIFICATIONS_SPARED
from agentcal.rate_limits import limiter_for
from workspaces.models import Agent, ApiKey, LimitFields, Workspace

KEY_PREFIX = "avs_live_"
LOOKUP_PREFIX_LENGTH = 10
_LOOKUP_ALPHABET = string.ascii_lowercase + string.digits
_CACHE_MAX_ENTRIES = 10_000
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _hasher() -> PasswordHasher:
    return PasswordHasher(
        time_cost=settings.ARGON2_TIME_COST,
        memory_cost=settings.ARGON2_MEMORY_COST_KIB,
        parallelism=settings.ARGON2_PARALLELISM,
        type=Type.ID,
    )


def api_key_create(*, agent: Agent, scopes: list[str], name: str = "") -> tuple[ApiKey, str]:
    """Create a key and return it with the raw key, which the caller shows once and forgets."""
    lookup = "".join(secrets.choice(_LOOKUP_ALPHABET) for _ in range(LOOKUP_PREFIX_LENGTH))
    raw = f"{KEY_PREFIX}{lookup}{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        agent=agent, name=name, prefix=lookup, key_hash=_hasher().hash(raw), scopes=sorted(set(scopes))
    )
    return key, raw


def bearer_key(authorization: str) -> str:
    """The raw key of an `Authorization: Bearer …` header; empty when the header is anything else."""
    scheme, _, raw = authorization.partition(" ")
    return raw.strip() if scheme.lower() == "bearer" else ""


def lookup_prefix(raw: str) -> str | None:
    if not raw.startswith(KEY_PREFIX) or len(raw) < len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH + 32:
        return None
    return raw[len(KEY_PREFIX) : len(KEY_PREFIX) + LOOKUP_PREFIX_LENGTH]


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _ExpiringLRU(Generic[K, V]):
    """key -> value, each forgotten `max_age` seconds after it was put; at most _CACHE_MAX_ENTRIES,
    the least recently used dropped first. Per process, thread-safe."""

    def __init__(self, max_age_setting: str) -> None:
        self._max_age_setting = max_age_setting
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            value, put_at = entry
            if time.monotonic() - put_at > getattr(settings, self._max_age_setting):
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = (value, time.monotonic())
            self._entries.move_to_end(key)
            while len(self._entries) > _CACHE_MAX_ENTRIES:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class _VerifiedKeyCache:
    """key id -> HMAC of the raw key argon2 accepted (for API_KEY_CACHE_SECONDS)."""

    def __init__(self) -> None:
        self._digests: _ExpiringLRU[int, bytes] = _ExpiringLRU("API_KEY_CACHE_SECONDS")

    @staticmethod
    def digest(raw: str) -> bytes:
        return hmac.digest(settings.SECRET_KEY.encode(), raw.encode(), "sha256")  # one call, in C

    def matches(self, key_id: int, digest: bytes) -> bool:
        cached = self._digests.get(key_id)
        return cached is not None and hmac.compare_digest(cached, digest)

    def remember(self, key_id: int, digest: bytes) -> None:
        self._digests.put(key_id, digest)

    def clear(self) -> None:
        self._digests.clear()
        key_rows.clear()
        _last_used_checked.clear()
        refused_secrets.clear()


verified_keys = _VerifiedKeyCache()
# (prefix, HMAC of a presented raw key) that argon2 refused. A prefix's hash never changes, so a refused
# secret stays refused; the time bound only frees memory.
refused_secrets: _ExpiringLRU[tuple[str, bytes], bool] = _ExpiringLRU("API_KEY_REFUSED_SECRET_CACHE_SECONDS")


@dataclass(frozen=True)
class _KeyRow:
    """A key row as read with its agent and workspace, and when: the database's clock then, and this
    process's monotonic clock then (together they give the database's time now, for expiry)."""

    key: ApiKey
    db_now: datetime
    read_at: float

    def database_now(self) -> datetime:
        return self.db_now + timedelta(seconds=time.monotonic() - self.read_at)

    def fresh_copy(self) -> ApiKey:
        """Instances of the request's own: a view may set attributes on its agent or workspace."""
        key, agent, workspace = (
            copy_of(self.key),
            copy_of(self.key.agent),
            copy_of(self.key.agent.workspace),
        )
        agent.workspace = workspace
        key.agent = agent
        return key


# prefix -> the key row; a copy is used only while no key, agent or workspace changed (local_cache).
key_rows: LocalCache[_KeyRow] = LocalCache("api key rows")
# key id -> time.monotonic() of this process's last last_used_at check.
_last_used_checked: dict[int, float] = {}


def api_keys_changed() -> None:
    """Call inside the transaction of a change to a key, agent or workspace made without the ORM's
    save() or delete() (a queryset `.update()`, raw SQL): every process stops using its copy of the
    key rows once it commits (saves and deletes are seen by themselves)."""
    rows_changed()


def api_key_verify(raw: str, *, peer: str = "") -> ApiKey:
    """Return the live key (with its agent and workspace loaded) for a raw key, or raise InvalidKey;
    RateLimited when `peer` (the caller's address) has had too many secrets refused lately."""
    prefix = lookup_prefix(raw)
    if prefix is None:
        raise InvalidKey("malformed")
    row = key_rows.get(prefix)
    if row is None:
        token = key_rows.token()  # before the read: a change landing meanwhile leaves a stale copy unused
        found = _load_key(prefix)
        if found is None:
            raise InvalidKey("unknown prefix")
        row = _KeyRow(key=found[0], db_now=found[1], read_at=time.monotonic())
        key_rows.put(prefix, row, token)
    key, db_now = row.fresh_copy(), row.database_now()
    workspace_id = key.agent.workspace_id
    digest = verified_keys.digest(raw)
    if not verified_keys.matches(key.pk, digest):
        _verify_secret(key, raw, digest, peer=peer)
        verified_keys.remember(key.pk, digest)
    # Checked after the secret so that a wrong secret cannot learn whether a prefix was revoked.
    if key.revoked_at is not None:
        raise InvalidKey("revoked", workspace_id)
    if key.expires_at is not None and key.expires_at <= db_now:
        raise InvalidKey("expired", workspace_id)
    if not key.agent.is_active:
        raise InvalidKey("agent disabled", workspace_id)
    _touch_last_used(key, db_now)
    return key


def _verify_secret(key: ApiKey, raw: str, digest: bytes, *, peer: str) -> None:
    """argon2, unless this secret was refused before or the peer's budget of refusals is spent."""
    workspace_id = key.agent.workspace_id
    if refused_secrets.get((key.prefix, digest)):
        KEY_VERIFICATIONS_SPARED.labels("refused_before").inc()
        raise InvalidKey("wrong secret (refused before)", workspace_id)
    per_key = limiter_for("API_KEY_WRONG_SECRETS_PER_MINUTE_PER_KEY_AND_IP")
    per_peer = limiter_for("API_KEY_WRONG_SECRETS_PER_MINUTE_PER_IP")
    per_key_bucket, per_peer_bucket = f"{key.prefix} {peer}", peer
    wait = max(per_key.seconds_until_allowed(per_key_bucket), per_peer.seconds_until_allowed(per_peer_bucket))
    if wait > 0:
        KEY_VERIFICATIONS_SPARED.labels("over_budget").inc()
        error = WrongKeysRateLimited(
            "Too many wrong API keys from this address; check the key and retry later.",
            limit_name="api_key_wrong_secrets",
            retry_after_seconds=max(1, math.ceil(wait)),
        )
        # For the audit row, as for InvalidKey: where the workspace sees attempts on its own keys.
        error.key_prefix, error.workspace_id = key.prefix, workspace_id
        raise error
    try:
        _hasher().verify(key.key_hash, raw)
    except (VerificationError, InvalidHashError) as exc:
        refused_secrets.put((key.prefix, digest), True)
        per_key.allow(per_key_bucket)
        per_peer.allow(per_peer_bucket)
        raise InvalidKey("wrong secret", workspace_id) from exc


# The limits and the pause, on agents and workspaces alike (workspaces/limits.py reads them).
_GUARDRAIL_COLUMNS = tuple(str(field.column) for field in LimitFields._meta.local_fields)
_KEY_COLUMNS = {
    ApiKey: (
        "id",
        "agent_id",
        "name",
        "prefix",
        "key_hash",
        "scopes",
        "created_at",
        "last_used_at",
        "revoked_at",
        "expires_at",
    ),
    Agent: (
        "id",
        "public_id",
        "workspace_id",
        "name",
        "slug",
        "priority",
        "max_priority",
        "is_active",
        "created_at",
        *_GUARDRAIL_COLUMNS,
    ),
    # What identifies it, and its guardrails (every request checks them): the rest (retention, mail
    # settings) is read when used, never stale.
    Workspace: ("id", "public_id", "slug", "name", "created_at", *_GUARDRAIL_COLUMNS),
}
# Model.from_db() takes a row's values in the model's field order (the limit fields, from an abstract base,
# come first).
_KEY_COLUMNS = {
    model: tuple(str(f.column) for f in model._meta.concrete_fields if f.column in columns)
    for model, columns in _KEY_COLUMNS.items()
}
_KEY_SQL = (
    "SELECT "
    + ", ".join(
        f"{alias}.{column}"
        for alias, model in (("k", ApiKey), ("a", Agent), ("w", Workspace))
        for column in _KEY_COLUMNS[model]
    )
    + ", now() FROM workspaces_apikey k"
    " JOIN workspaces_agent a ON a.id = k.agent_id"
    " JOIN workspaces_workspace w ON w.id = a.workspace_id"
    " WHERE k.prefix = %s"
)


def _load_key(prefix: str) -> tuple[ApiKey, datetime] | None:
    """The key with its agent and workspace, and the database's now, in one round trip.

    Hand-written SQL because this runs on every request: the ORM spends longer compiling the
    equivalent three-table query than PostgreSQL spends answering it (docs/performance-notes.md).
    The database's now judges expiry, not the web worker's clock.
    """
    with connection.cursor() as cursor:
        cursor.execute(_KEY_SQL, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    values = iter(row)
    built = {
        model: model.from_db(connection.alias, list(columns), [next(values) for _ in columns])
        for model, columns in _KEY_COLUMNS.items()
    }
    key, agent, workspace = built[ApiKey], built[Agent], built[Workspace]
    agent.workspace = workspace  # type: ignore[attr-defined]
    key.agent = agent  # type: ignore[attr-defined]
    return key, next(values)  # type: ignore[return-value]


def _touch_last_used(key: ApiKey, db_now: datetime) -> None:
    # At most one write per key per minute: last_used_at is for humans, not for every request. The
    # check is per process (the copy of the row does not see other processes' writes); the UPDATE's
    # own condition keeps several processes from writing it more than once a minute between them.
    checked_at = time.monotonic()
    if checked_at - _last_used_checked.get(key.pk, -LAST_USED_RESOLUTION.total_seconds()) < (
        LAST_USED_RESOLUTION.total_seconds()
    ):
        return
    _last_used_checked[key.pk] = checked_at
    if key.last_used_at is not None and db_now - key.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiKey.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=Now() - LAST_USED_RESOLUTION), pk=key.pk
    ).update(last_used_at=Now())
