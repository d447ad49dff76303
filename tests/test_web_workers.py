"""The web node's default worker count follows where PostgreSQL runs."""

from __future__ import annotations

import copy
import os

import pytest
from django.conf import settings
from django.test import override_settings

from agentcal.sizing import default_web_workers

CORES = os.cpu_count() or 1


def _database_at(host: str) -> dict:
    databases = copy.deepcopy(settings.DATABASES)
    databases["default"]["HOST"] = host
    return databases


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "", "/var/run/postgresql"])
def test_postgresql_on_this_machine_gets_cores_plus_one(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    with override_settings(DATABASES=_database_at(host), USING_EMBEDDED_POSTGRES=False):
        assert default_web_workers() == CORES + 1


def test_the_embedded_postgresql_is_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    with override_settings(DATABASES=_database_at("db.internal"), USING_EMBEDDED_POSTGRES=True):
        assert default_web_workers() == CORES + 1


def test_postgresql_elsewhere_gets_twice_the_cores_plus_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    with override_settings(DATABASES=_database_at("db.internal"), USING_EMBEDDED_POSTGRES=False):
        assert default_web_workers() == 2 * CORES + 1


def test_web_concurrency_decides_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEB_CONCURRENCY", "7")
    with override_settings(DATABASES=_database_at("127.0.0.1"), USING_EMBEDDED_POSTGRES=True):
        assert default_web_workers() == 7
