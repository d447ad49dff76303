"""A disabled agent's keys are refused by the API: every page that lists them says so instead of "active"."""

from __future__ import annotations

import re

import pytest

from tests.dashboard.pages_helpers import make_team, signed_in, text
from workspaces.keys import api_key_create, verified_keys
from workspaces.models import Agent

AGENTS = "/w/acme/agents"


@pytest.fixture
def team(db, django_user_model):
    yield make_team(django_user_model)
    verified_keys.clear()


def key_statuses(html: str) -> list[str]:
    return re.findall(r'data-testid="key-status">([^<]+)<', html)


def test_a_disabled_agents_keys_show_as_not_usable_on_its_page_and_the_agents_list(team):
    key, raw = api_key_create(agent=team.sdr, scopes=["calendars:read"])
    owner = signed_in(team.owner)
    assert key_statuses(text(owner.get(f"{AGENTS}/{team.sdr.public_id}"))) == ["active"]

    assert owner.post(f"{AGENTS}/{team.sdr.public_id}/disable").status_code == 302
    assert Agent.objects.get(pk=team.sdr.pk).is_active is False
    # The API refuses the key: the page must not call it active.
    assert owner.get("/v1/calendars", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code in (401, 403)

    page = text(owner.get(f"{AGENTS}/{team.sdr.public_id}"))
    assert key_statuses(page) == ["agent disabled"]
    assert 'class="pill agent-disabled"' in page and 'class="pill active"' not in page
    assert 'data-testid="rotate-form"' not in page  # a refused key is not rotated into a working one
    assert 'data-testid="revoke-form"' in page  # but it can still be revoked for good

    listing = text(owner.get(AGENTS))
    row = listing[listing.index(f'data-agent="{team.sdr.public_id}"') :]
    count = row[row.index('data-testid="key-count">') :].split("</td>")[0]
    assert "agent disabled" in count and " active" not in count

    # The new key page (what a rotation leads to) says the same.
    assert key_statuses(text(owner.get(f"{AGENTS}/{team.sdr.public_id}/keys/{key.prefix}/new"))) == [
        "agent disabled"
    ]

    assert owner.post(f"{AGENTS}/{team.sdr.public_id}/enable").status_code == 302
    assert key_statuses(text(owner.get(f"{AGENTS}/{team.sdr.public_id}"))) == ["active"]
