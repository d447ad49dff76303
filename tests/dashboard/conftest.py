"""Fixtures shared by the dashboard tests."""

from __future__ import annotations

import pytest

from tests.dashboard.pages_helpers import Team, make_team


@pytest.fixture
def team(db: None, django_user_model: type) -> Team:
    """Acme with its people and agents, and Globex beside it (pages_helpers.make_team)."""
    return make_team(django_user_model)
