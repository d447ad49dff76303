"""The web node's default worker count follows where PostgreSQL runs."""

from __future__ import annotations

import os

import pytest

from agentcal.sizing import default_web_workers, web_workers


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "", "/var/run/postgresql"])
def test_postgresql_on_this_machine_gets_cores_plus_one(host: str) -> None:
    assert web_workers(configured=None, database_host=host, embedded_database=False, cores=2) == 3


def test_the_embedded_postgresql_is_on_this_machine() -> None:
    assert web_workers(configured=None, database_host="db.internal", embedded_database=True, cores=4) == 5


def test_postgresql_elsewhere_gets_twice_the_cores_plus_one() -> None:
    assert web_workers(configured=None, database_host="db.internal", embedded_database=False, cores=2) == 5


def test_web_concurrency_decides_when_set() -> None:
    assert web_workers(configured="7", database_host="127.0.0.1", embedded_database=True, cores=2) == 7


def test_the_test_run_reads_its_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite's PostgreSQL is this machine's (embedded or local), so its default is cores + 1.
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    assert default_web_workers() == (os.cpu_count() or 1) + 1
    monkeypatch.setenv("WEB_CONCURRENCY", "9")
    assert default_web_workers() == 9
