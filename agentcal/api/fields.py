"""Input fields and serializer base classes shared by the agent API."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict

from agentcal.errors import InvalidRange

MAX_JSON_FIELD_BYTES = 16 * 1024
# PostgreSQL's timestamptz takes offsets up to ±15:59:59 (RFC 3339's syntax allows ±23:59).
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)
# The times the API accepts: every computation on them (alternatives, bucket labels, a week's window
# either side) stays far from the ends of Python's and PostgreSQL's calendars.
EARLIEST_NAIVE_UTC = datetime(1970, 1, 1)  # noqa: DTZ001 — compared with a UTC wall time
LATEST_NAIVE_UTC = datetime(9000, 1, 1)  # noqa: DTZ001


class StrictSerializer(serializers.Serializer):
    # Refuses fields it does not know: a typo (`ttl_second`) must not be silently ignored. (A comment:
    # drf-spectacular would publish a docstring as the description of every input schema.)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


def validated(serializer_class: type[serializers.Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    """`data` checked by `serializer_class` (400 invalid_request naming each bad field)."""
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class OutputSerializer(serializers.Serializer):
    # Comments, not a docstring: drf-spectacular would publish a docstring as every output schema's
    # description. A serializer that only renders: DRF deep-copies and binds every declared field for
    # each instance, a third of a hold's response time; rendering never changes a field, so each class
    # binds its fields once, on first use, and every later instance reuses them.

    _shared_fields: BindingDict | None = None

    @property
    def fields(self) -> BindingDict:
        cls = type(self)
        shared: BindingDict | None = cls.__dict__.get("_shared_fields")
        if shared is None:
            shared = BindingDict(self)
            for name, field in self.get_fields().items():
                shared[name] = field
            cls._shared_fields = shared
        return shared


@extend_schema_field(OpenApiTypes.DATETIME)
class OffsetDateTimeField(serializers.Field):
    """RFC 3339 with an explicit offset; a naive time is `400 invalid_range`, not a guess."""

    def to_internal_value(self, data: Any) -> datetime:
        if not isinstance(data, str):
            raise InvalidRange(f"{self.field_name} must be an RFC 3339 string.", field=self.field_name)
        parsed = None
        with contextlib.suppress(ValueError):  # out-of-range parts, e.g. hour 60
            parsed = parse_datetime(data.strip())
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
        # Compared as naive UTC wall times: converting a time near year 1 or 9999 could itself overflow.
        utc_wall = parsed.replace(tzinfo=None) - offset if 1 < parsed.year < 9999 else None
        if utc_wall is None or not EARLIEST_NAIVE_UTC <= utc_wall < LATEST_NAIVE_UTC:
            raise InvalidRange(
                f"{self.field_name} must lie between 1970-01-01T00:00:00Z and 9000-01-01T00:00:00Z.",
                field=self.field_name,
            )
        return parsed

    def to_representation(self, value: datetime) -> str:
        return serializers.DateTimeField().to_representation(value)


class TimezoneField(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        name = super().to_internal_value(data)
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise serializers.ValidationError(f"Unknown IANA time zone {name!r}.") from None
        return name


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
