"""The OpenAPI schema at /v1/schema describes what the server does, problems and constraints included.

Agents and SDK generators read it, and the schema fuzz test holds the server to it: every status an
operation can answer is listed, with problems as application/problem+json; request bodies that refuse
unknown fields say so (`additionalProperties: false`); list endpoints document their page envelope.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from agentcal.api.fields import (
    DATE_TIME_PATTERN,
    NOT_BLANK_PATTERN,
    BoundedJSONField,
    OffsetDateTimeField,
    OutputSerializer,
    StrictSerializer,
    TimezoneField,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"

# What any operation of the agent API may answer, whatever it does: a malformed query (400), no or a
# bad key (401), a missing scope (403), over the agent's request rate, its requests in flight or a
# budget, or too many wrong secrets for a key from this address (429), a database or broker that did
# not answer (503).
ALWAYS = (400, 401, 403, 429, 503)
# What any write may answer besides: an Idempotency-Key still running (409) or reused with another
# request (422), a chunked body the server cannot read (411), too large a body (413), not JSON (415),
# an agent its owners paused (423).
WRITES = (409, 411, 413, 415, 422, 423)
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class ProblemOutput(serializers.Serializer):
    # RFC 9457 problem details; endpoint-specific members (e.g. `alternatives`) sit beside these.
    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    error = serializers.CharField(help_text="Machine-readable code, e.g. slot_conflict.")


# Problems by status, each family with the members its errors add (none required: which members come
# depends on the `error`), so a generated client reads `alternatives` of a 409 without a cast.
class InvalidRequestProblemOutput(ProblemOutput):
    def get_fields(self) -> dict[str, serializers.Field]:
        # Declared here: a class attribute `errors` would shadow Serializer.errors.
        fields: dict[str, serializers.Field] = super().get_fields()
        fields["errors"] = serializers.JSONField(
            required=False, help_text="The fields at fault, each with its messages."
        )
        return fields


class ForbiddenProblemOutput(ProblemOutput):
    required_scope = serializers.CharField(required=False, help_text="The scope the key lacks.")


class SpanOutput(serializers.Serializer):
    start_time = serializers.DateTimeField()
    end_time = serializers.DateTimeField()


class FreeSpanOutput(SpanOutput):
    # A span nothing was in when it was computed (a conflict's or a lost reservation's alternatives).
    pass


class ConflictProblemOutput(ProblemOutput):
    alternatives = FreeSpanOutput(
        many=True, required=False, help_text="Free spans near the one asked for, best first (slot_conflict)."
    )
    conflicting = serializers.JSONField(required=False, help_text="What is in the way (slot_conflict).")
    conflicting_bucket = serializers.CharField(
        required=False,
        help_text="slot_conflict: `BUCKET#` and the start of the calendar's `slot_minutes` bucket in which "
        "the first overlap starts, e.g. BUCKET#2026-10-04T14:00:00Z.",
    )
    held_by_priority = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="Null: the person's own calendar or a buffer is in the way.",
    )
    caller_priority = serializers.IntegerField(required=False)
    retryable = serializers.BooleanField(
        required=False, help_text="Whether the same request may succeed later."
    )


class UnprocessableProblemOutput(ProblemOutput):
    # The calendar rules a well-formed request broke; each member comes with the errors named.
    calendar = serializers.CharField(required=False, help_text="The calendar whose rule refused the span.")
    max_allowed_minutes = serializers.IntegerField(
        required=False, help_text="booking_too_long: the longest span the calendar takes."
    )
    requested_minutes = serializers.IntegerField(
        required=False, help_text="booking_too_long: the span asked for."
    )
    max_buckets_allowed = serializers.IntegerField(
        required=False,
        help_text="booking_too_long: the most `slot_minutes` buckets one reservation may touch.",
    )
    timezone = serializers.CharField(required=False, help_text="outside_working_hours: the calendar's zone.")
    local_start_time = serializers.CharField(
        required=False, help_text="outside_working_hours: the span's start in the calendar's zone."
    )
    local_end_time = serializers.CharField(
        required=False, help_text="outside_working_hours: the span's end in the calendar's zone."
    )
    hours_that_day = serializers.JSONField(
        required=False,
        help_text="outside_working_hours: the working hours of each local day the span touches.",
    )
    min_notice_minutes = serializers.IntegerField(required=False, help_text="insufficient_notice.")
    earliest_start_time = serializers.DateTimeField(
        required=False, help_text="insufficient_notice: the earliest start the calendar takes now."
    )
    server_time = serializers.DateTimeField(required=False, help_text="The server's clock when it refused.")


class PreconditionFailedProblemOutput(ProblemOutput):
    current_version = serializers.IntegerField(required=False, help_text="The calendar's version now.")


class PausedProblemOutput(ProblemOutput):
    paused = serializers.ChoiceField(choices=["agent", "workspace"], required=False)
    paused_at = serializers.DateTimeField(required=False)
    retryable = serializers.BooleanField(required=False)


class TooManyRequestsProblemOutput(ProblemOutput):
    limit_name = serializers.CharField(
        required=False, help_text="rate_limited: requests, searches, in_flight or api_key_wrong_secrets."
    )
    quota = serializers.CharField(required=False, help_text="quota_exceeded: the budget used up.")
    limit = serializers.IntegerField(required=False)
    window_seconds = serializers.IntegerField(required=False)
    retry_after = serializers.IntegerField(
        required=False, allow_null=True, help_text="Seconds to wait; null when waiting cannot help."
    )


class UnavailableProblemOutput(ProblemOutput):
    retryable = serializers.BooleanField(required=False)
    calendars = serializers.JSONField(
        required=False, help_text="upstream_stale: each stale link's calendar and last_synced_at."
    )


PROBLEM_FAMILIES: dict[int, type[ProblemOutput]] = {
    400: InvalidRequestProblemOutput,
    403: ForbiddenProblemOutput,
    409: ConflictProblemOutput,
    412: PreconditionFailedProblemOutput,
    422: UnprocessableProblemOutput,
    423: PausedProblemOutput,
    429: TooManyRequestsProblemOutput,
    503: UnavailableProblemOutput,
}


def problem_schema(status: int) -> type[ProblemOutput]:
    return PROBLEM_FAMILIES.get(status, ProblemOutput)


def problems(*statuses: int) -> dict[Any, Any]:
    """The problem responses an endpoint adds to the ones every operation has (ALWAYS, WRITES)."""
    return {(status, PROBLEM_MEDIA_TYPE): problem_schema(status) for status in statuses}


@cache
def page_of(item: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The envelope every list endpoint answers: one page of `item`, and the cursor of the next."""
    name = item.__name__.removesuffix("Output") + "Page"
    return type(
        name,
        (OutputSerializer,),
        {
            "results": item(many=True),
            "next_cursor": serializers.CharField(
                allow_null=True, help_text="Pass as `cursor` for the next page; null on the last page."
            ),
            "__module__": item.__module__,
        },
    )


# Headers every keyed answer carries (workspaces.limits.rate_limit_headers), and the request id.
_RATE_LIMIT_HEADERS = {
    "RateLimit-Limit": "Requests the agent's bucket holds (its burst).",
    "RateLimit-Remaining": "Requests left in the bucket now.",
    "RateLimit-Reset": "Seconds until the bucket is full again.",
}
_HEADER_SCHEMAS: dict[str, dict[str, Any]] = {
    **{
        name: {"schema": {"type": "integer", "minimum": 0}, "description": description}
        for name, description in _RATE_LIMIT_HEADERS.items()
    },
    "RateLimit-Policy": {
        "schema": {"type": "string"},
        "description": "The burst and the seconds the bucket takes to refill from empty, e.g. `60;w=3`.",
    },
    "X-Request-ID": {"schema": {"type": "string"}, "description": "This request's id, as audited."},
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 0},
        "description": "Whole seconds to wait before trying again; waiting this long is enough.",
    },
    "Idempotent-Replayed": {
        "schema": {"type": "string", "enum": ["true"]},
        "description": "Present on the stored answer of an Idempotency-Key already used with this request.",
    },
    "ETag": {
        "schema": {"type": "string", "pattern": r'^"[0-9]+"$'},
        "description": "The calendar's version (or the hold's fencing token): send it back as If-Match.",
    },
}
# Answers that say when to try again.
_RETRY_STATUSES = frozenset({"409", "429", "503"})
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]{1,255}$"
TIMEZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$"


class AgentAPISchema(AutoSchema):
    def _keyed(self) -> bool:
        """An operation of the agent API proper: not the schema or health (no key), nor a webhook (what
        AgentCal sends, described from the receiver's side)."""
        return self.view.authentication_classes != [] and self.path.startswith("/v1/")

    def get_summary(self) -> str | None:
        """The view's `summaries[method]`: a short verb phrase a generated client can name things by."""
        return super().get_summary() or getattr(self.view, "summaries", {}).get(self.method)

    def get_description(self) -> str:  # type: ignore[override]
        return str(super().get_description() or "") or f"{self.get_summary()}."

    def get_override_parameters(self) -> list[Any]:
        parameters: list[Any] = list(super().get_override_parameters())
        if not self._keyed() or self.method not in MUTATING_METHODS:
            return parameters
        parameters.append(
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Any unique string per logical call (1-255 printable ASCII, no spaces): a retry "
                "with the same key, agent and request gets the first answer again (for 24 h).",
                pattern=IDEMPOTENCY_KEY_PATTERN,
            )
        )
        if getattr(self.view, "honours_if_match", False):
            parameters.append(
                OpenApiParameter(
                    "If-Match",
                    str,
                    OpenApiParameter.HEADER,
                    description='The calendar version read with availability (its ETag, e.g. `"42"`): the '
                    "write happens only if the calendar has not changed since, else 412.",
                    pattern=r'^"[0-9]+"$',
                )
            )
        return parameters

    def _get_response_headers_for_code(self, status_code: Any, direction: Any = "response") -> dict[str, Any]:
        headers: dict[str, Any] = dict(super()._get_response_headers_for_code(status_code, direction))
        if not self._keyed():
            return headers
        status = str(status_code)
        names = ["X-Request-ID"]
        if status not in ("401", "403"):  # no key proved: no bucket to speak of
            names += [*_RATE_LIMIT_HEADERS, "RateLimit-Policy"]
        if status in _RETRY_STATUSES:
            names.append("Retry-After")
        if self.method in MUTATING_METHODS and status.startswith("2"):
            names.append("Idempotent-Replayed")
        if getattr(self.view, "answers_etag", False) and status.startswith("2"):
            names.append("ETag")
        return {**headers, **{name: _HEADER_SCHEMAS[name] for name in names}}

    def get_operation_id(self) -> str:
        declared: str | None = getattr(self.view, "operation_ids", {}).get(self.method)
        return declared or str(super().get_operation_id())

    # Not get_response_serializers: @extend_schema(responses=...) replaces that method wholesale.
    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        bodies: dict[str, Any] = super()._get_response_bodies(direction)
        if not self._keyed():
            return bodies  # no key, no problems of that kind
        implied = {*ALWAYS, *(WRITES if self.method in MUTATING_METHODS else ())}
        if "{" in self.path:
            implied.add(404)  # a path id that names nothing in the caller's workspace
        for status in sorted(implied - {int(code) for code in bodies}):
            bodies[str(status)] = self._get_response_for_code(
                problem_schema(status), str(status), [PROBLEM_MEDIA_TYPE], direction
            )
        return dict(sorted(bodies.items()))

    def _get_request_body(self, direction: Any = "request") -> Any:
        if self.method == "DELETE":
            return self._delete_body(direction) if getattr(self.view, "delete_takes_body", False) else None
        body = super()._get_request_body(direction)
        if body:
            body["required"] = True  # every body the API takes is refused when missing
        return body

    def _delete_body(self, direction: Any) -> Any:
        # drf-spectacular documents bodies on PUT, PATCH and POST only; OpenAPI 3.1 allows one on DELETE,
        # and a DELETE that takes a secret (a hold token) must carry it there rather than in the URL.
        serializer = self.get_request_serializer()
        schema, _ = self._get_request_for_media_type(serializer, direction)
        return {"content": {"application/json": {"schema": schema}}, "required": True}

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if isinstance(serializer, StrictSerializer) and direction == "request":
            schema["additionalProperties"] = False
            if serializer.partial:
                schema["minProperties"] = 1  # a change that changes nothing is refused
        return schema

    def _map_serializer_field(self, field: Any, direction: str, bypass_extensions: bool = False) -> Any:
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if isinstance(field, BoundedJSONField) and field.expect is not None:
            schema = {"type": "object" if field.expect is dict else "array", **schema}
            if field.expect is list:
                schema.setdefault("items", {})
            else:
                schema.setdefault("additionalProperties", True)  # free-form: any keys, any JSON values
        elif isinstance(field, OffsetDateTimeField):
            schema = {**schema, "pattern": DATE_TIME_PATTERN}
        elif isinstance(field, TimezoneField):
            # A name, not an enum: ~600 zone names collide once generators turn them into identifiers
            # (Etc/GMT0, GMT0), and each tz database update would change the contract. The server checks
            # the name against its own tz database.
            schema = {
                **schema,
                "pattern": TIMEZONE_PATTERN,
                "description": "An IANA time zone name, e.g. `Europe/Berlin` or `America/New_York`.",
                "example": "Europe/Berlin",
            }
        elif direction == "request" and isinstance(field, serializers.CharField) and isinstance(schema, dict):
            patterns = [getattr(field, "PATTERN", None)]
            if not field.allow_blank:
                schema.setdefault("minLength", 1)
                patterns.append(NOT_BLANK_PATTERN)
            patterns = [pattern for pattern in patterns if pattern]
            if len(patterns) == 1:
                schema = {**schema, "pattern": patterns[0]}
            elif patterns:
                schema = {**schema, "allOf": [{"pattern": pattern} for pattern in patterns]}
        return schema


def null_is_any_json(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """A postprocessing hook: drf-spectacular writes a nullable free-form value (`state`, `conflict_details`)
    as `oneOf: [{}, {type: null}]`, which no null satisfies (it matches both branches). Any JSON value
    already includes null."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            fixed = {key: fix(value) for key, value in node.items()}
            if fixed.get("oneOf") == [{}, {"type": "null"}]:
                del fixed["oneOf"]
            return fixed
        if isinstance(node, list):
            return [fix(item) for item in node]
        return node

    fixed: dict[str, Any] = fix(result)
    return fixed
