"""How one benchmark thread talks to what it measures.

Engine clients (`EngineSession` in-process, `HttpSession` through the API) share one shape — hold,
commit, release — so every engine scenario runs unchanged over both. Workers adapt a client (or a
baseline store) to the one operation the herd and disjoint scenarios need: reserve a span, as a hold,
a hold + commit, or a baseline's insert. Each thread opens its own worker, so each has its own
database connection (Django's are per thread) or its own HTTP connection.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import httpx
from django.db import connections

from agentcal.clock import isoformat_z
from agentcal.errors import AgentCalError
from bench.baselines import BaselineStore
from bench.lean_http import LeanHttpClient
from bench.stats import CONFLICT, Outcome
from bookings import engine
from bookings.models import Calendar
from bookings.spans import Span
from workspaces.actor import Actor
from workspaces.models import Agent


class EngineClient(Protocol):
    mode: str

    def hold(
        self,
        calendar: str,
        span: Span,
        *,
        priority: int | None = None,
        ttl_seconds: int | None = None,
        also: Sequence[str] = (),
    ) -> Outcome: ...

    def commit(self, calendar: str, hold: Outcome) -> Outcome: ...

    def release(self, hold: Outcome) -> Outcome: ...

    def close(self) -> None: ...


class Worker(Protocol):
    def reserve(self, calendar_index: int, span: Span, *, commit: bool) -> list[Outcome]: ...

    def close(self) -> None: ...


def http_client(base_url: str, **options: Any) -> httpx.Client:
    """An httpx client. The benchmark speaks plain HTTP, but every new client would still load the
    system's CA bundle into a TLS context of its own (tens of ms of CPU each, 500 racers' worth in the
    big herd): they share one."""
    return httpx.Client(base_url=base_url, verify=_tls_context(), **options)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def racer_client(
    base_url: str, *, lean: bool, timeout: float, headers: dict[str, str] | None = None
) -> httpx.Client | LeanHttpClient:
    """A racer's own client: httpx, or with `lean` bench/lean_http.py (the big herd's racers)."""
    if lean:
        return LeanHttpClient(base_url, headers=headers, timeout=timeout, tls=_tls_context())
    return http_client(base_url, headers=headers or {}, timeout=timeout)


# --- The engine, called in-process ------------------------------------------------------------------------


class EngineSession:
    """Calls bookings.engine directly, as the API views do, on this thread's own database connection."""

    mode = "in-process"

    def __init__(self, *, agent_pk: int) -> None:
        agent = Agent.objects.select_related("workspace").get(pk=agent_pk)
        self.actor = Actor(workspace=agent.workspace, agent=agent)
        self._calendars: dict[str, Calendar] = {}

    def _calendar(self, public_id: str) -> Calendar:
        if public_id not in self._calendars:
            self._calendars[public_id] = Calendar.objects.get(
                public_id=public_id, workspace=self.actor.workspace
            )
        return self._calendars[public_id]

    def hold(
        self,
        calendar: str,
        span: Span,
        *,
        priority: int | None = None,
        ttl_seconds: int | None = None,
        also: Sequence[str] = (),
    ) -> Outcome:
        primary, others = self._calendar(calendar), [self._calendar(c) for c in also]

        return _engine_call(
            "hold",
            201,
            lambda: engine.hold_create(
                actor=self.actor,
                calendar=primary,
                span=span,
                priority=priority,
                ttl_seconds=ttl_seconds,
                also_calendars=others,
            ),
        )

    def commit(self, calendar: str, hold: Outcome) -> Outcome:
        cal = self._calendar(calendar)
        return _engine_call(
            "commit",
            201,
            lambda: engine.hold_commit(actor=self.actor, calendar=cal, hold_token=hold.hold_token),
        )

    def release(self, hold: Outcome) -> Outcome:
        return _engine_call(
            "release",
            200,
            lambda: engine.hold_release(actor=self.actor, hold_id=hold.hold_id, hold_token=hold.hold_token),
        )

    def close(self) -> None:
        connections.close_all()  # this thread's connections only: Django keeps them per thread


def _engine_call(op: str, status: int, call: Callable[[], engine.ReservationGroup]) -> Outcome:
    started = time.perf_counter()
    try:
        group = call()
    except AgentCalError as exc:
        return Outcome(
            op,
            exc.status,
            time.perf_counter() - started,
            code=exc.code,
            alternatives=len(exc.extra.get("alternatives") or ()),
        )
    except Exception as exc:  # a crash is a result to report (as a 500 would be), not a reason to stop
        return Outcome(op, 500, time.perf_counter() - started, code=type(exc).__name__)
    seconds = time.perf_counter() - started
    return Outcome(op, status, seconds, hold_id=group.primary.hold_id, hold_token=group.hold_token or "")


# --- The engine, through the HTTP API ---------------------------------------------------------------------


class HttpSession:
    """One agent's HTTP connection to /v1: its own httpx client, or with `lean` its own LeanHttpClient
    (the big herd's racers: bench/lean_http.py says why)."""

    mode = "http"

    def __init__(
        self,
        *,
        base_url: str,
        raw_key: str,
        timeout: float = 30.0,
        idempotency_keys: bool = False,
        headers: dict[str, str] | None = None,
        lean: bool = False,
    ) -> None:
        api = base_url.rstrip("/") + "/v1"
        sent = {"Authorization": f"Bearer {raw_key}", **(headers or {})}
        self.client = racer_client(api, lean=lean, timeout=timeout, headers=sent)
        self.idempotency_keys = idempotency_keys

    def _send(self, op: str, method: str, path: str, body: dict[str, Any]) -> tuple[Outcome, dict[str, Any]]:
        headers = {"Idempotency-Key": str(uuid.uuid4())} if self.idempotency_keys else {}
        started = time.perf_counter()
        try:
            response = self.client.request(method, path, json=body, headers=headers)
            seconds = time.perf_counter() - started
        except (httpx.HTTPError, OSError) as exc:  # LeanHttpError is an OSError
            return Outcome(op, 0, time.perf_counter() - started, code=type(exc).__name__), {}
        try:
            payload = response.json()
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {}
        if response.status_code >= 400:
            alternatives = payload.get("alternatives") or ()
            return Outcome(
                op,
                response.status_code,
                seconds,
                code=_problem_code(payload),
                alternatives=len(alternatives),
            ), payload
        return Outcome(op, response.status_code, seconds), payload

    def hold(
        self,
        calendar: str,
        span: Span,
        *,
        priority: int | None = None,
        ttl_seconds: int | None = None,
        also: Sequence[str] = (),
    ) -> Outcome:
        body: dict[str, Any] = {"start_time": isoformat_z(span.start), "end_time": isoformat_z(span.end)}
        if priority is not None:
            body["priority"] = priority
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        if also:
            body["also_calendars"] = list(also)
        outcome, payload = self._send("hold", "POST", f"/calendars/{calendar}/holds", body)
        if outcome.ok:
            return Outcome(
                "hold",
                outcome.status,
                outcome.seconds,
                hold_id=str(payload.get("id", "")),
                hold_token=str(payload.get("hold_token", "")),
            )
        return outcome

    def commit(self, calendar: str, hold: Outcome) -> Outcome:
        return self._send(
            "commit", "POST", f"/calendars/{calendar}/commits", {"hold_token": hold.hold_token}
        )[0]

    def release(self, hold: Outcome) -> Outcome:
        return self._send("release", "DELETE", f"/holds/{hold.hold_id}", {"hold_token": hold.hold_token})[0]

    def close(self) -> None:
        self.client.close()


def _problem_code(problem: dict[str, Any]) -> str:
    """The problem's machine code; for a refused budget, with which one (`rate_limited:requests`,
    `quota_exceeded:live_holds`), so the report can tell the limits apart."""
    code = str(problem.get("error", ""))
    which = problem.get("limit_name") or problem.get("quota")
    return f"{code}:{which}" if which else code


# --- Workers: what herd and disjoint call -----------------------------------------------------------------


class EngineWorker:
    """Reserve through the engine: a hold (herd), or a hold then its commit (disjoint)."""

    def __init__(self, client: EngineClient, calendars: Sequence[str]) -> None:
        self.client = client
        self.calendars = list(calendars)

    def reserve(self, calendar_index: int, span: Span, *, commit: bool) -> list[Outcome]:
        calendar = self.calendars[calendar_index]
        held = self.client.hold(calendar, span)
        if not commit or not held.ok:
            return [held]
        return [held, self.client.commit(calendar, held)]

    def close(self) -> None:
        self.client.close()


class BaselineWorker:
    """Reserve through a baseline, in-process through psycopg (one insert transaction per booking)."""

    def __init__(
        self, store: BaselineStore, *, variant: str, calendar_ids: Sequence[int], agent: str
    ) -> None:
        self.store = store
        self.variant = variant
        self.calendar_ids = list(calendar_ids)
        self.agent = agent

    def reserve(self, calendar_index: int, span: Span, *, commit: bool) -> list[Outcome]:
        started = time.perf_counter()
        try:
            status = self.store.reserve(
                self.variant,
                calendar_id=self.calendar_ids[calendar_index],
                start=span.start,
                end=span.end,
                agent=self.agent,
            )
        except Exception as exc:  # reported as an error, like a 500
            with contextlib.suppress(Exception):
                self.store.conn.rollback()
            return [Outcome("insert", 500, time.perf_counter() - started, code=type(exc).__name__)]
        code = CONFLICT if status == 409 else ""
        return [Outcome("insert", status, time.perf_counter() - started, code=code)]

    def close(self) -> None:
        self.store.close()


class BaselineHttpWorker:
    """Reserve through a baseline served by bench.baseline_wsgi under gunicorn (with `lean`, through
    bench/lean_http.py, as the big herd's racers do)."""

    def __init__(
        self,
        *,
        base_url: str,
        variant: str,
        calendar_ids: Sequence[int],
        agent: str,
        timeout: float = 30.0,
        lean: bool = False,
    ) -> None:
        self.client = racer_client(base_url, lean=lean, timeout=timeout)
        self.variant = variant
        self.calendar_ids = list(calendar_ids)
        self.agent = agent

    def reserve(self, calendar_index: int, span: Span, *, commit: bool) -> list[Outcome]:
        body = {"start_time": isoformat_z(span.start), "end_time": isoformat_z(span.end), "agent": self.agent}
        started = time.perf_counter()
        try:
            response = self.client.request(
                "POST", f"/{self.variant}/{self.calendar_ids[calendar_index]}", json=body
            )
        except (httpx.HTTPError, OSError) as exc:  # LeanHttpError is an OSError
            return [Outcome("insert", 0, time.perf_counter() - started, code=type(exc).__name__)]
        seconds = time.perf_counter() - started
        code = CONFLICT if response.status_code == 409 else ""
        if response.status_code >= 400 and not code:
            code = str(response.json().get("error", "")) if response.content else ""
        return [Outcome("insert", response.status_code, seconds, code=code)]

    def close(self) -> None:
        self.client.close()
