"""Input fields and serializer base classes shared by the agent API."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime, timedelta
from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict

from agentcal.errors import InvalidRange
from agentcal.moments import zone_named
from agentcal.text import LINE_BREAKS, is_one_line

MAX_JSON_FIELD_BYTES = 16 * 1024
# PostgreSQL's timestamptz takes offsets up to ±15:59:59 (RFC 3339's syntax allows ±23:59).
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)
EARLIEST_YEAR, LATEST_YEAR = 1970, 8999
# RFC 3339 date-time as the server takes it, for the published schema: those years, offsets within
# ±15:59 (PostgreSQL's limit), seconds without a leap second, at most microseconds.
DATE_TIME_PATTERN = (
    "^(19[7-9][0-9]|[2-8][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-5]):[0-5][0-9])$"
)


# What JSON Schema (ECMA-262's `\s`) calls white space, spelled out: the server refuses exactly the
# blank strings the published `pattern` refuses (Python's str.strip() has a different set).
_JSON_SCHEMA_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
NOT_BLANK_PATTERN = f"[^{_JSON_SCHEMA_SPACE}]"
_NOT_BLANK = re.compile(NOT_BLANK_PATTERN)
# The JSON type each field kind takes in a body: DRF would turn 5 into "5" or "30" into 30.
_JSON_TYPES: tuple[tuple[type[serializers.Field], tuple[type, ...], str], ...] = (
    (serializers.CharField, (str,), "a string"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.BooleanField, (bool,), "true or false"),
)


class FieldsBoundOnce(serializers.Serializer):
    # Comments, not a docstring: drf-spectacular would publish a docstring as every schema's
    # description. DRF deep-copies and binds every declared field for each serializer instance
    # (docs/performance-notes.md has the cost); validating or rendering never changes a field, so each
    # class binds its fields once and later instances reuse them. Fields read `partial` and `context`
    # from their root, so a top-level serializer without context shares the fields bound to a blank
    # instance of its class with the same `partial`; a nested one (bound once, with its parent's fields)
    # or one given a context keeps its own.

    _shared_fields: dict[bool, BindingDict]

    @property
    def fields(self) -> BindingDict:
        if self.parent is not None or self._context:
            own: BindingDict | None = self.__dict__.get("_own_fields")
            if own is None:
                own = self.__dict__["_own_fields"] = self._bound_fields()
            return own
        cls = type(self)
        shared: dict[bool, BindingDict] = cls.__dict__.get("_shared_fields") or {}
        fields = shared.get(self.partial)
        if fields is None:
            fields = shared[self.partial] = cls(partial=self.partial)._bound_fields()
            cls._shared_fields = shared
        return fields

    def _bound_fields(self) -> BindingDict:
        fields = BindingDict(self)
        for name, field in self.get_fields().items():
            fields[name] = field
        return fields


class StrictSerializer(FieldsBoundOnce):
    # A JSON body held to its schema: unknown fields are refused (a typo such as `ttl_second` must not
    # be silently ignored), every value must have its field's JSON type, and text is taken as sent
    # (not trimmed) but may not be blank unless the field allows it. (A comment, not a docstring:
    # drf-spectacular would publish a docstring as the description of every input schema.)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        for field in [
            *fields.values(),
            *(f.child for f in fields.values() if isinstance(f, serializers.ListField)),
        ]:
            if isinstance(field, serializers.CharField):
                field.trim_whitespace = False
        return fields

    def unknown_field_message(self, name: str) -> str:
        return "Unknown field."

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            errors: dict[str, list[str]] = {
                name: [self.unknown_field_message(name)] for name in sorted(set(data) - set(self.fields))
            }
            for name, field in self.fields.items():
                if name in data and data[name] is not None:
                    problem = _json_type_problem(field, data[name])
                    if problem:
                        errors[name] = [problem]
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


def _integral(field: serializers.Field, value: Any) -> bool:
    # The schema is OpenAPI 3.1, whose JSON Schema counts 30.0 as an integer: a client whose JSON library
    # writes whole numbers that way is sending what the schema allows. DRF's IntegerField reads it as 30.
    return isinstance(field, serializers.IntegerField) and isinstance(value, float) and value.is_integer()


def _json_type_problem(field: serializers.Field, value: Any) -> str | None:
    values = value if isinstance(field, serializers.ListField) and isinstance(value, list) else [value]
    kind = field.child if isinstance(field, serializers.ListField) else field
    for field_class, json_types, name in _JSON_TYPES:
        if isinstance(kind, field_class):
            for item in values:
                wrong_type = not (isinstance(item, json_types) or _integral(kind, item)) or (
                    bool not in json_types and isinstance(item, bool)
                )
                if wrong_type:
                    return f"Must be {name}."
                if (
                    isinstance(kind, serializers.CharField)
                    and not kind.allow_blank
                    and not _NOT_BLANK.search(item)
                ):
                    return "May not be blank."
    return None


class OutboundUrlField(serializers.CharField):
    """A URL we will send requests to (a webhook target, an upstream calendar): only the scheme is
    checked here; whether its host may be reached is the SSRF guard's call (webhooks/url_guard.py), when
    it is used."""

    PATTERN = "^[Hh][Tt][Tt][Pp][Ss]?://"


class OneLineField(serializers.CharField):
    """Text without line breaks (agentcal.text.is_one_line, the rule for mail headers too)."""

    PATTERN = f"^[^{LINE_BREAKS}]*$"

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if not is_one_line(value):
            raise serializers.ValidationError("Must be one line (no line breaks).")
        return value


def validated(serializer_class: type[serializers.Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    """`data` checked by `serializer_class` (400 invalid_request naming each bad field)."""
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class OutputSerializer(FieldsBoundOnce):
    # A serializer that only renders (a comment: see FieldsBoundOnce).
    pass


@extend_schema_field(OpenApiTypes.DATETIME)
class OffsetDateTimeField(serializers.Field):
    """RFC 3339 with an explicit offset; a naive time is `400 invalid_range`, not a guess."""

    def to_internal_value(self, data: Any) -> datetime:
        if not isinstance(data, str):
            raise InvalidRange(f"{self.field_name} must be an RFC 3339 string.", field=self.field_name)
        parsed = None
        with contextlib.suppress(ValueError):  # out-of-range parts, e.g. hour 60
            parsed = parse_datetime(data)
        if parsed is None:
            raise InvalidRange(
                f"{self.field_name} is not an RFC 3339 date-time: {data[:64]!r}.", field=self.field_name
            )
        if parsed.tzinfo is None:
            raise InvalidRange(
                f"{self.field_name} has no UTC offset; send e.g. 2026-10-04T14:00:00Z or +02:00.",
                field=self.field_name,
            )
        offset = parsed.utcoffset()
        if offset is None or abs(offset) > MAX_UTC_OFFSET:
            raise InvalidRange(
                f"{self.field_name} has a UTC offset beyond ±15:59; no time zone is that far from UTC.",
                field=self.field_name,
            )
        # The year as written (the published pattern says the same): far enough from year 1 and 9999
        # that converting, adding a week or a bucket never overflows.
        if not EARLIEST_YEAR <= parsed.year <= LATEST_YEAR:
            raise InvalidRange(
                f"{self.field_name} must be in the years {EARLIEST_YEAR}-{LATEST_YEAR}.",
                field=self.field_name,
            )
        return parsed

    def to_representation(self, value: datetime) -> str:
        return serializers.DateTimeField().to_representation(value)


class TimezoneField(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        name = super().to_internal_value(data)
        if zone_named(name) is None:  # the one rule for a zone name, the dashboard's too
            raise serializers.ValidationError(f"Unknown IANA time zone {name!r}.")
        return name


@extend_schema_field({"type": "object", "additionalProperties": True})
class FreeFormObjectField(serializers.JSONField):
    """An object of the agent's own (e.g. `metadata`), given back as it was sent: any keys, any values."""


class BoundedJSONField(serializers.JSONField):
    """Free-form agent data, capped in size so one request cannot bloat a row. `expect` is the JSON
    type it must be (dict: an object, list: an array), or None for any JSON value."""

    def __init__(
        self, *, expect: type[dict] | type[list] | None, max_bytes: int = MAX_JSON_FIELD_BYTES, **kwargs: Any
    ) -> None:
        self.expect = expect
        self.max_bytes = max_bytes
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if self.expect is not None and not isinstance(value, self.expect):
            raise serializers.ValidationError(
                f"Must be a JSON {'object' if self.expect is dict else 'array'}."
            )
        if len(json.dumps(value).encode()) > self.max_bytes:
            raise serializers.ValidationError(f"Must serialize to at most {self.max_bytes} bytes.")
        return value
