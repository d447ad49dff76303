"""A chunked request body (no Content-Length) is read, not silently taken for an empty one."""

from __future__ import annotations

from collections.abc import Iterator

import httpx

from tests.api.test_bad_input import assert_problem
from tests.bookings.helpers import rows_of
from tests.helpers import http_client, slot


def chunks(data: bytes, size: int = 7) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_a_chunked_body_is_read_under_gunicorn(sdr, calendar, app_server):
    span = slot(30)
    body = httpx.Response(200, json={**span, "title": "Chunked"}).content
    with http_client(f"{app_server}/v1", headers=dict(sdr.client.headers)) as client:
        created = client.post(
            f"/calendars/{calendar['id']}/holds",
            content=chunks(body),
            headers={"Content-Type": "application/json"},
        )
        assert created.request.headers.get("transfer-encoding") == "chunked"
        assert created.status_code == 201, created.text
        assert created.json()["title"] == "Chunked"
        assert [r.title for r in rows_of(calendar["id"])] == ["Chunked"]

        too_big = client.post(
            f"/calendars/{calendar['id']}/holds",
            content=chunks(b'{"title": "' + b"x" * 300_000 + b'"}', size=65536),
            headers={"Content-Type": "application/json"},
        )
        assert_problem(too_big, 413, "payload_too_large")


def test_a_server_that_cannot_read_a_chunked_body_asks_for_a_length(sdr, calendar):
    # Django's development server passes the raw socket: the body cannot be read safely.
    response = sdr.client.post(
        f"/calendars/{calendar['id']}/holds",
        content=chunks(httpx.Response(200, json=slot(30)).content),
        headers={"Content-Type": "application/json"},
    )
    assert_problem(response, 411, "length_required")
    assert rows_of(calendar["id"]) == []
