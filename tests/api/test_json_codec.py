"""The agent API's JSON codec reads and writes what DRF's standard-library path did, value for value and
refusal for refusal, through the API and on their own."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ParseError
from rest_framework.renderers import JSONRenderer as StandardJSONRenderer

from agentcal import json_codec
from agentcal.api.parsers import BoundedJSONParser, _finite_float, _refuse_constant
from agentcal.api.renderers import JSONRenderer

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def standard_loads(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float)


def codec_loads(raw: bytes) -> Any:
    return json_codec.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)


def outcome(read: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "value", read(raw)
    except (ValueError, RecursionError) as exc:
        return "refused", type(exc).__name__


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_a_document_reads_as_the_standard_library_reads_it(value: Any) -> None:
    for raw in (
        json.dumps(value).encode(),
        json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"),
    ):
        assert outcome(codec_loads, raw) == outcome(standard_loads, raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"priority": 123456789012345678901234567890}',  # exact as an int, not a float
        b'{"a": 1e400}',
        b'{"a": NaN}',
        b'{"a": -Infinity}',
        b'{"a": "\\ud800"}',
        b"\xef\xbb\xbf{}",
        b'{"a": 1, "a": 2}',
        b'{"a": "\\u0000"}',
        b"[" * 2000 + b"]" * 2000,
        b"\xff\xfe",
        b'{"a": 1.0, "b": -0.0, "c": 1e-7}',
        b"",
    ],
)
def test_edge_cases_read_as_the_standard_library_reads_them(raw: bytes) -> None:
    assert outcome(codec_loads, raw) == outcome(standard_loads, raw)


def test_the_parser_still_refuses_what_postgresql_cannot_store() -> None:
    with pytest.raises(ParseError, match="U\\+0000"):
        BoundedJSONParser().parse(_Stream(b'{"title": "a\\u0000b"}'))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_a_response_renders_as_drf_renders_it(value: Any) -> None:
    ours, standard = JSONRenderer().render(value), StandardJSONRenderer().render(value)
    if _has_float(value):  # a float may be written another way (1e-05 or 0.00001): the same number
        assert json.loads(ours) == json.loads(standard)
    else:
        assert ours == standard  # byte for byte (None renders as an empty body either way)


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(map(_has_float, value.values()))
    return isinstance(value, list) and any(map(_has_float, value))


@pytest.mark.parametrize(
    "value",
    [
        {"at": datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC), "day": date(2026, 1, 1)},
        {"amount": Decimal("1.50"), "id": uuid.UUID(int=7), "after": timedelta(seconds=5)},
        {"separators": "a\u2028b\u2029c", 1: "an integer key"},
        {"wide": 2**70},
        {"lone": "\ud800"},
        None,
    ],
)
def test_values_outside_plain_json_render_as_drf_renders_them(value: Any) -> None:
    assert outcome_of(JSONRenderer().render, value) == outcome_of(StandardJSONRenderer().render, value)


@pytest.mark.parametrize(
    "value", [{"a": [1, "é", None]}, {1: True}, {"wide": 2**70}, {"at": datetime(2026, 1, 1, tzinfo=UTC)}]
)
def test_a_stored_json_value_is_what_json_dumps_stores(value: Any) -> None:
    def stored(dump: Any) -> tuple[str, Any]:
        try:
            written = dump(value)
        except TypeError:
            return "refused", None
        return "stored", json.loads(written)

    assert stored(json_codec.dumps_jsonb) == stored(json.dumps)


def test_a_pretty_printed_answer_is_still_pretty() -> None:
    rendered = JSONRenderer().render({"a": [1]}, "application/json; indent=2")
    assert rendered == StandardJSONRenderer().render({"a": [1]}, "application/json; indent=2")
    assert b"\n" in rendered


def outcome_of(render: Any, value: Any) -> tuple[str, Any]:
    try:
        return "rendered", render(value)
    except (TypeError, ValueError) as exc:
        return "refused", type(exc).__name__


class _Stream:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def read(self, size: int = -1) -> bytes:
        return self.raw
