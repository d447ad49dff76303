"""Helpers for the approval tests: requesting an approval, a hold gated by one."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers import Persona, create_calendar, slot


def request_approval(persona: Persona, **fields: Any) -> httpx.Response:
    body = {"summary": "Book a demo with Initech", "evidence": {"thread": "msg_1"}, **fields}
    return persona.client.post("/approvals", json=body)


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    return response.json()


def problem(response: httpx.Response, status: int, error: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["error"] == error, body
    return body


def gated_hold(
    persona: Persona, *, calendar_settings: dict[str, Any] | None = None, hours_ahead: int = 30, **fields: Any
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A fresh calendar, a hold on it by `persona`, and an approval gating that hold."""
    calendar = create_calendar(persona, **(calendar_settings or {}))
    span = slot(hours_ahead=hours_ahead)
    hold = persona.client.post(f"/calendars/{calendar['id']}/holds", json=span)
    assert hold.status_code == 201, hold.text
    approval = created(request_approval(persona, hold_id=hold.json()["id"], **fields))
    return calendar, hold.json(), approval
