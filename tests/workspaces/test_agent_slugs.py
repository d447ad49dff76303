"""Agent slugs are lowercase: the slug is the local part of the agent's mail address, matched without
regard to case, so `Sales` and `sales` would share one address. New slugs are lowercased where agents are
created (the dashboard's form, agent_create), the database refuses any other, and the migration that
added that rule lowercased existing slugs, giving a suffix where two would have collided."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, transaction

from agentcal.errors import AgentSlugTaken
from tests.dashboard.pages_helpers import actor, make_team, signed_in
from workspaces.models import Agent, Workspace
from workspaces.services import agent_create

AGENTS = "/w/acme/agents"


@pytest.fixture
def team(db, django_user_model):
    return make_team(django_user_model)


def test_a_slug_given_in_capitals_is_stored_lowercase_and_then_taken(team):
    owner = signed_in(team.owner)
    response = owner.post(AGENTS, {"name": "Sales desk", "slug": "Sales-Desk", "priority": "100"})
    assert response.status_code == 302
    assert Agent.objects.get(workspace=team.workspace, name="Sales desk").slug == "sales-desk"

    response = owner.post(AGENTS, {"name": "Other desk", "slug": "SALES-desk", "priority": "100"})
    assert response.status_code == 400
    assert not Agent.objects.filter(name="Other desk").exists()
    with pytest.raises(AgentSlugTaken):
        agent_create(actor=actor(team.sdr), name="Third", slug="sAles-deSK")


@pytest.fixture
def acme(db) -> Workspace:
    return Workspace.objects.create(slug="acme", name="Acme")


def test_the_database_refuses_a_slug_with_capitals(acme):
    with pytest.raises(IntegrityError, match="agent_slug_lowercase"), transaction.atomic():
        Agent.objects.create(workspace=acme, name="Sales", slug="Sales")


def test_the_migration_lowercases_slugs_and_the_already_lowercase_one_keeps_its_address(acme):
    migration = importlib.import_module("workspaces.migrations.0004_agent_slug_lowercase")
    other = Workspace.objects.create(slug="globex", name="Globex")
    # Rows as they could be before the rule (PostgreSQL DDL is transactional: the test's rollback puts
    # the constraint back).
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE workspaces_agent DROP CONSTRAINT agent_slug_lowercase")
    made = {
        label: Agent.objects.create(workspace=workspace, name=label, slug=slug).pk
        for label, workspace, slug in [
            ("Sales upper", acme, "Sales"),
            ("sales lower", acme, "sales"),
            ("SALES shouting", acme, "SALES"),
            ("Ops alone", acme, "Ops"),
            ("Sales elsewhere", other, "Sales"),
        ]
    }

    migration.lowercase_slugs(apps, None)

    slugs = {label: Agent.objects.get(pk=pk).slug for label, pk in made.items()}
    assert slugs == {
        "Sales upper": "sales-2",
        "sales lower": "sales",  # mail to sales@ reached it (or its twin) before: it keeps the address
        "SALES shouting": "sales-3",
        "Ops alone": "ops",
        "Sales elsewhere": "sales",  # another workspace, another domain
    }
