"""Approval fixtures: people who decide (Django users with a workspace membership) and request helpers.

Agents (`sdr`, `exec_assistant`, `outsider`) and the live server come from tests/conftest.py; the webhook
receiver and the in-process Celery worker from tests/webhooks/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from accounts.models import Membership
from tests.conftest import Persona, create_calendar, slot
from tests.webhooks.conftest import celery_worker, receiver, webhook_settings  # noqa: F401
from workspaces.models import Workspace


@pytest.fixture
def make_person(transactional_db: None) -> Callable[..., User]:
    def make(email: str, *, workspace: Workspace, role: str = "approver") -> User:
        user = get_user_model().objects.create_user(username=email, email=email)
        Membership.objects.create(user=user, workspace=workspace, role=role)
        return user

    return make


@pytest.fixture
def owner(sdr: Persona, make_person: Callable[..., User]) -> User:
    """The acme workspace's owner: gets the notification emails, may decide."""
    return make_person("olivia@acme.test", workspace=sdr.agent.workspace, role="owner")


@pytest.fixture
def teammate(sdr: Persona, make_person: Callable[..., User]) -> User:
    """An ordinary member of acme: may decide, gets no emails."""
    return make_person("tom@acme.test", workspace=sdr.agent.workspace, role="approver")


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
