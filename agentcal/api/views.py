"""The base class every agent API view derives from: auth, scopes, problem+json and idempotency."""

from __future__ import annotations

import functools
import logging
from typing import Any, ClassVar

from django.db import DatabaseError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentcal.api.idempotency import (
    REPLAYED_HEADERS,
    StoredResponse,
    idempotency_claim,
    idempotency_complete,
    idempotency_release,
    request_fingerprint,
)
from agentcal.errors import InvalidRequest, NotFound, RateLimited
from agentcal.ids import is_public_id
from agentcal.metrics import IDEMPOTENT_REPLAYS
from agentcal.shared_buckets import Decision
from agentcal.text import is_storable, storable_text
from workspaces.actor import Actor
from workspaces.keys import bearer_key
from workspaces.limits import (
    REFUSED_KEYS,
    check_request_rate,
    enter_in_flight,
    leave_in_flight,
    rate_limit_headers,
    refuse_if_paused,
)

logger = logging.getLogger(__name__)
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


_INSTANCES: dict[tuple[type, str], list[Any]] = {}


def _shared_instances(view_class: type, attribute: str) -> list[Any]:
    """One instance of each class a view class names in `attribute` (a list of classes, or one class)."""
    found = _INSTANCES.get((view_class, attribute))
    if found is None:
        named = getattr(view_class, attribute)
        classes = named if isinstance(named, list | tuple) else [named]
        found = _INSTANCES.setdefault((view_class, attribute), [made() for made in classes])
    return found


class _Replay(Exception):
    def __init__(self, stored: StoredResponse) -> None:
        self.stored = stored


class AgentAPIView(APIView):
    # {"GET": Scope.X, ...}: checked by workspaces.authentication.HasRequiredScope.
    required_scopes: ClassVar[dict[str, str]] = {}
    # Audit event prefix for refusals, e.g. "calendar.hold" -> "calendar.hold.rejected".
    audit_action: ClassVar[str | None] = None
    # A search across calendars: it also spends from the agent's searches-per-minute bucket.
    counts_as_search: ClassVar[bool] = False
    # For the schema: each method's summary ("Hold a span on a calendar").
    summaries: ClassVar[dict[str, str]] = {}
    # Each method's operationId: a verb phrase in snake_case (`create_hold`), what generated clients name
    # their functions by.
    operation_ids: ClassVar[dict[str, str]] = {}
    # For the schema: the write takes If-Match (a calendar version); the success answer carries an ETag.
    honours_if_match: ClassVar[bool] = False
    answers_etag: ClassVar[bool] = False

    # The claimed record's id and the raw key (which seals the stored response), while the request runs.
    _idempotency: tuple[int, str] | None = None
    # The agent counted in flight in this process (its pk), and what its rate buckets said.
    _in_flight: int | None = None
    _rate: Decision | None = None

    # DRF makes its parsers, renderers, authenticators and permission checks anew for every request; they
    # keep no state, and their classes are fixed when the view class is made, so each view class makes
    # them once.
    def get_parsers(self) -> list[Any]:
        return _shared_instances(type(self), "parser_classes")

    def get_renderers(self) -> list[Any]:
        return _shared_instances(type(self), "renderer_classes")

    def get_authenticators(self) -> list[Any]:
        return _shared_instances(type(self), "authentication_classes")

    def get_permissions(self) -> list[Any]:
        return _shared_instances(type(self), "permission_classes")

    def get_content_negotiator(self) -> BaseContentNegotiation:
        return _shared_instances(type(self), "content_negotiation_class")[0]

    @property
    def actor(self) -> Actor:
        user = self.request.user
        assert isinstance(user, Actor)
        return user

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authentication, scopes
        self._idempotency = None
        self._guard(request)
        for name, value in kwargs.items():
            if name.endswith("_id") and not is_public_id(value):
                raise NotFound(f"No such {name.removesuffix('_id').replace('_', ' ')} in this workspace.")
        for name, values in request.query_params.lists():
            if not all(map(is_storable, [name, *values])):
                raise InvalidRequest(
                    "Query parameters may not contain U+0000 or unpaired surrogates.",
                    errors={storable_text(name, 64): ["Unstorable characters."]},
                )
        key = request.META.get("HTTP_IDEMPOTENCY_KEY")
        if key is None or request.method not in MUTATING_METHODS or not hasattr(self, request.method.lower()):
            return  # a method the view lacks is answered 405 by DRF, whatever its headers
        fingerprint = request_fingerprint(
            method=request.method,
            path=request.path,
            query=request.META.get("QUERY_STRING", ""),
            body=request.data,  # parsed here, so malformed JSON is refused before anything is claimed
        )
        assert self.actor.agent is not None
        outcome = idempotency_claim(agent=self.actor.agent, key=key, fingerprint=fingerprint)
        if isinstance(outcome, StoredResponse):
            raise _Replay(outcome)
        self._idempotency = (outcome, key)

    def _guard(self, request: Request) -> None:
        """The agent's guardrails, before any work: its requests in flight here, the emergency stop
        (writes only), its request rate. Reads of a paused agent still answer."""
        actor = self.actor
        self._in_flight = enter_in_flight(actor)
        if request.method in MUTATING_METHODS and not str(
            self.required_scopes.get(request.method, "")
        ).endswith(":read"):
            refuse_if_paused(actor)
        try:
            self._rate = check_request_rate(actor, search=self.counts_as_search)
        except RateLimited as refused:
            if refused.agent_limit == "requests":
                # Its next requests are refused by the first middleware until the bucket has room.
                raw_key = bearer_key(request.META.get("HTTP_AUTHORIZATION", ""))
                assert actor.agent is not None
                REFUSED_KEYS.remember(raw_key, agent=actor.agent, decision=refused.rate_decision)  # type: ignore[attr-defined]
            raise

    def handle_exception(self, exc: Exception) -> Response:
        refused_by = getattr(exc, "rate_decision", None)
        if refused_by is not None:
            self._rate = refused_by  # the 429 says how long its bucket needs, like every answer
        if isinstance(exc, _Replay):
            IDEMPOTENT_REPLAYS.inc()
            stored = exc.stored
            headers = {**stored.headers, "Idempotent-Replayed": "true"}
            content_type = headers.pop("Content-Type", None)
            return Response(stored.body, status=stored.status, headers=headers, content_type=content_type)
        try:
            return super().handle_exception(exc)
        except Exception:
            # An unexpected error (a 500): release the claim so the agent's retry runs for real.
            claim, self._idempotency = self._idempotency, None
            if claim is not None:
                idempotency_release(record_id=claim[0])
            raise

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        # Once the server has sent the answer and closed it (every WSGI server does), the request's
        # objects are let go: DRF links them in cycles — the parser's and the renderer's contexts name
        # the view, the view its request and response, Django's View.setup() makes `head` a method of
        # the view held by the view — which left every request to Python's cyclic collector
        # (docs/performance-notes.md, "Reference cycles").
        closers = response._resource_closers  # type: ignore[attr-defined]  # Django's own list: no public API
        closers.append(functools.partial(_unlink_drf_objects, self, request, response))
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            leave_in_flight(in_flight)
        rate, self._rate = self._rate, None
        for name, value in rate_limit_headers(rate).items():
            response[name] = value
        claim, self._idempotency = self._idempotency, None
        if claim is None:
            return response
        record_id, key = claim
        if response.status_code >= 500:
            # Nothing was written (the engine's transactions are all or nothing), so the retry must run
            # for real. After a lost connection this is the first statement on a fresh one; if the
            # database is still away, the claim lapses after IDEMPOTENCY_STALE_CLAIM_SECONDS instead.
            try:
                idempotency_release(record_id=record_id)
            except DatabaseError as exc:
                logger.warning("could not release idempotency claim %s: %s", record_id, type(exc).__name__)
            return response
        headers = {name: response[name] for name in REPLAYED_HEADERS if response.has_header(name)}
        if response.content_type:
            headers["Content-Type"] = response.content_type
        idempotency_complete(
            record_id=record_id, key=key, status=response.status_code, body=response.data, headers=headers
        )
        return response


def _unlink_drf_objects(view: AgentAPIView, request: Request, response: Response) -> None:
    request.parser_context = {}
    response.renderer_context = {}  # type: ignore[attr-defined]  # set by DRF, unstubbed
    view.__dict__.clear()  # the request's own instance: nothing reads it once the answer is closed
