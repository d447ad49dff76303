"""An agent's guardrails on the request path: which limits apply to it, the emergency stop, the request
rate (shared buckets in Redis, one round trip), the cap on its requests in flight in this process, and
what a refusal leaves behind (a metric always; an audit row once per window; the owners told once a
day). The budgets the engine must count exactly (live holds, bookings per day) are checked in its
write: bookings/engine/budgets.py.

Design: docs/architecture.md, "Guardrails".
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime

from django.conf import settings

from agentcal import broker, shared_buckets
from agentcal.clock import isoformat_z
from agentcal.errors import AgentCalError, AgentPaused, RateLimited
from agentcal.metrics import LIMIT_REFUSALS
from workspaces.actor import Actor
from workspaces.keys import bearer_key, lookup_prefix, verified_keys
from workspaces.models import Agent, Workspace

# Refusals by one agent's one limit leave one audit row per this many seconds; the rest are counted.
REFUSAL_AUDIT_WINDOW_SECONDS = 60
# The task that tells the owners the first time in a UTC day an agent meets one of its limits.
LIMIT_NOTICE_TASK = "guardrails.limit_reached"


@dataclass(frozen=True)
class Limits:
    requests_per_second: float
    request_burst: int
    live_holds: int
    bookings_per_day: int
    searches_per_minute: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


LIMIT_NAMES = tuple(Limits.__dataclass_fields__)


def workspace_limits(workspace: Workspace) -> Limits:
    """The workspace's defaults for its agents: its own where set, else the installation's."""
    defaults = settings.AGENT_LIMIT_DEFAULTS
    return Limits(
        **{
            name: value if (value := getattr(workspace, f"limit_{name}")) is not None else defaults[name]
            for name in LIMIT_NAMES
        }
    )


def agent_limits(agent: Agent, workspace: Workspace) -> Limits:
    """What binds the agent: its own overrides where set, else its workspace's defaults."""
    inherited = workspace_limits(workspace)
    own = {name: getattr(agent, f"limit_{name}") for name in LIMIT_NAMES}
    return Limits(
        **{name: value if value is not None else getattr(inherited, name) for name, value in own.items()}
    )


# --- The emergency stop ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pause:
    scope: str  # "agent" or "workspace"
    paused_at: datetime
    paused_by: str


def pause_of(agent: Agent, workspace: Workspace) -> Pause | None:
    """The pause that stops the agent's writes, if any (the workspace's first: it stops every agent)."""
    if workspace.paused_at is not None:
        return Pause("workspace", workspace.paused_at, workspace.paused_by)
    if agent.paused_at is not None:
        return Pause("agent", agent.paused_at, agent.paused_by)
    return None


def refuse_if_paused(actor: Actor) -> None:
    assert actor.agent is not None
    pause = pause_of(actor.agent, actor.workspace)
    if pause is None:
        return
    whose = "Its workspace" if pause.scope == "workspace" else "This agent"
    error = AgentPaused(
        f"{whose} was paused by an owner at {isoformat_z(pause.paused_at)}: writes are refused until a "
        "person resumes it; reads still work. Stop and ask the workspace's owners.",
        paused=pause.scope,
        paused_at=isoformat_z(pause.paused_at),
    )
    error.agent_limit = "paused"
    raise error


# --- The request rate ------------------------------------------------------------------------------------


def request_buckets(agent: Agent, limits: Limits, *, search: bool) -> list[shared_buckets.Bucket]:
    buckets = [
        shared_buckets.Bucket(f"{agent.public_id}:requests", limits.requests_per_second, limits.request_burst)
    ]
    if search:
        per_minute = limits.searches_per_minute
        buckets.append(shared_buckets.Bucket(f"{agent.public_id}:searches", per_minute / 60.0, per_minute))
    return buckets


def check_request_rate(actor: Actor, *, search: bool) -> shared_buckets.Decision | None:
    """Spend one request (and one search) from the agent's buckets, or raise RateLimited. None when
    the rate check is off; a failed-open decision (no states) when Redis did not answer."""
    if not settings.AGENT_RATE_LIMITS_ENABLED:
        return None
    assert actor.agent is not None
    limits = agent_limits(actor.agent, actor.workspace)
    decision = shared_buckets.take(
        request_buckets(actor.agent, limits, search=search), window_seconds=REFUSAL_AUDIT_WINDOW_SECONDS
    )
    if decision.refused is None:
        return decision
    name = decision.refused.bucket.key.rsplit(":", 1)[1]
    if name == "searches":
        detail = f"Over this agent's {limits.searches_per_minute} searches a minute."
    else:
        detail = (
            f"Over this agent's request rate ({limits.requests_per_second:g} a second, bursts of "
            f"{limits.request_burst})."
        )
    error = RateLimited(
        f"{detail} Retry after {decision.retry_after_seconds} s; the RateLimit-* headers of every answer "
        "say how much is left.",
        limit_name=name,
        retry_after_seconds=decision.retry_after_seconds,
    )
    error.agent_limit = name
    error.first_marks = (decision.first_in_window, decision.first_today)
    error.rate_decision = decision  # type: ignore[attr-defined]  # for the answer's RateLimit-* headers
    raise error


def rate_limit_headers(decision: shared_buckets.Decision | None) -> dict[str, str]:
    """RateLimit-* headers of the request bucket (draft-ietf-httpapi-ratelimit-headers' fields): how
    many requests the bucket holds, how many are left now, and in how many seconds it is full again;
    the policy names the burst and the seconds it takes to refill from empty."""
    if decision is None or decision.failed_open:
        return {}
    state = decision.states[0]
    bucket = state.bucket
    return {
        "RateLimit-Limit": str(bucket.burst),
        "RateLimit-Remaining": str(state.remaining),
        "RateLimit-Reset": str(math.ceil(state.full_in_seconds)),
        "RateLimit-Policy": f"{bucket.burst};w={math.ceil(bucket.burst / bucket.per_second)}",
    }


# --- Refusing again, at once ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Refused:
    digest: bytes  # HMAC of the raw key (workspaces.keys.verified_keys.digest): a prefix alone is not it
    until: float  # time.monotonic() when the Retry-After the agent was told has passed
    agent_public_id: str
    burst: int


class RefusedKeys:
    """Keys this process refused for their request rate, until the Retry-After they were told has
    passed: a runaway agent's next requests are refused by the first middleware, for the cost of an
    HMAC, before anything else runs. An agent that honours Retry-After (or paces itself by the
    RateLimit-* headers) never meets it. Bounded: at most MAX_KEYS, the oldest forgotten first."""

    MAX_KEYS = 10_000

    def __init__(self) -> None:
        self._refused: dict[str, _Refused] = {}
        self._lock = threading.Lock()

    def remember(self, raw_key: str, *, agent: Agent, decision: shared_buckets.Decision) -> None:
        refused = decision.refused
        prefix = lookup_prefix(raw_key)
        if refused is None or prefix is None:
            return
        entry = _Refused(
            digest=verified_keys.digest(raw_key),
            until=time.monotonic() + decision.retry_after_seconds,
            agent_public_id=agent.public_id,
            burst=refused.bucket.burst,
        )
        with self._lock:
            self._refused.pop(prefix, None)
            if len(self._refused) >= self.MAX_KEYS:
                del self._refused[next(iter(self._refused))]
            self._refused[prefix] = entry

    def refusal(self, authorization: str) -> RateLimited | None:
        """The refusal for a request with this Authorization header, if its key is still refused here."""
        raw = bearer_key(authorization)
        prefix = lookup_prefix(raw) if raw else None
        entry = self._refused.get(prefix) if prefix else None
        if entry is None:
            return None
        wait = entry.until - time.monotonic()
        if wait <= 0 or not hmac.compare_digest(entry.digest, verified_keys.digest(raw)):
            return None
        LIMIT_REFUSALS.labels(entry.agent_public_id, "requests").inc()
        retry_after = max(1, math.ceil(wait))
        error = RateLimited(
            f"Over this agent's request rate. Retry after {retry_after} s; the RateLimit-* headers of every "
            "answer say how much is left.",
            limit_name="requests",
            retry_after_seconds=retry_after,
        )
        error.agent_limit = "requests"
        error.rate_headers = {  # type: ignore[attr-defined]
            "Retry-After": str(retry_after),
            "RateLimit-Limit": str(entry.burst),
            "RateLimit-Remaining": "0",
        }
        return error

    def clear(self) -> None:
        with self._lock:
            self._refused.clear()


REFUSED_KEYS = RefusedKeys()


# --- Requests in flight in this process ------------------------------------------------------------------


class InFlight:
    """How many requests of each agent this process is serving now (threaded servers serve several)."""

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()
        self._lock = threading.Lock()

    def enter(self, agent_pk: int) -> bool:
        """Count the request in, unless the agent is at the cap already (then nothing is counted)."""
        with self._lock:
            if self._counts[agent_pk] >= settings.AGENT_MAX_IN_FLIGHT_PER_PROCESS:
                return False
            self._counts[agent_pk] += 1
            return True

    def leave(self, agent_pk: int) -> None:
        with self._lock:
            self._counts[agent_pk] -= 1
            if self._counts[agent_pk] <= 0:
                del self._counts[agent_pk]


IN_FLIGHT = InFlight()


def enter_in_flight(actor: Actor) -> int:
    """Count the request in (returns the agent's pk, for leave_in_flight) or refuse it at once."""
    assert actor.agent is not None
    if IN_FLIGHT.enter(actor.agent.pk):
        return actor.agent.pk
    cap = settings.AGENT_MAX_IN_FLIGHT_PER_PROCESS
    error = RateLimited(
        f"This agent already has {cap} requests in progress on this server process; send fewer at once.",
        limit_name="in_flight",
        retry_after_seconds=1,
    )
    error.agent_limit = "in_flight"
    raise error


def leave_in_flight(agent_pk: int) -> None:
    IN_FLIGHT.leave(agent_pk)


# --- What a refusal leaves behind ------------------------------------------------------------------------


def note_refusal(actor: Actor | None, error: AgentCalError) -> bool:
    """Count a refusal by one of the agent's limits, tell the owners if it is the first of the agent's
    UTC day for that limit, and say whether to audit it (the first of its window)."""
    if actor is None or actor.agent is None:
        return True
    agent, limit = actor.agent, error.agent_limit
    LIMIT_REFUSALS.labels(agent.public_id, limit).inc()
    marks = error.first_marks
    if marks is None:
        marks = shared_buckets.mark_refusal(
            f"{agent.public_id}:{limit}", window_seconds=REFUSAL_AUDIT_WINDOW_SECONDS
        )
    first_in_window, first_today = marks
    if first_today and limit != "paused":  # the owners paused it themselves
        broker.enqueue(LIMIT_NOTICE_TASK, (agent.pk, limit), fallback=None)
    return first_in_window
