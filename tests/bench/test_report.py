from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import report as reports
from bench.runner import Bench
from tests.bench.conftest import tiny

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_full_in_process_run_writes_json_markdown_and_chart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "benchmark.md").write_text(
        "# Benchmark\n\nHand-written analysis.\n\n"
        f"{reports.MARKER_START}\nold numbers\n{reports.MARKER_END}\n\n## Why\n\nKept too.\n"
    )
    report = Bench(
        tiny(
            scenarios=("herd", "disjoint", "mix"),
            baselines=True,
            key_verify_calls=50,
            duration=0.6,
            history_sizes=(0, 300),
            history_holds=5,
        )
    ).run()

    notes = reports.write_all(report, docs_dir=tmp_path)

    assert notes == []
    data = json.loads((tmp_path / "benchmark.json").read_text())
    assert {r["scenario"] for r in data["results"]} == {"herd", "disjoint", "mix"}
    assert data["machine"]["cpu_count"] >= 1
    assert data["machine"]["postgresql"].startswith("PostgreSQL")
    assert data["key_verify"]["calls_after_first"] == 50
    assert [h["earlier_bookings"] for h in data["history"]] == [0, 300]
    assert all(h["hold_latency_ms"]["count"] == 5 for h in data["history"])
    goals = {g["goal"]: g["met"] for g in data["goals"]}
    assert goals["zero double bookings in every engine scenario"] is True
    assert goals["exactly one winner per herd round (engine)"] is True
    markdown = (tmp_path / "benchmark.md").read_text()
    assert "Hand-written analysis." in markdown and "Kept too." in markdown
    assert "old numbers" not in markdown
    assert "| herd | engine | in-process |" in markdown
    assert "**Calendar history**" in markdown
    assert (tmp_path / "img" / "benchmark.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The baseline schema is gone.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_test'")
        assert cursor.fetchone()[0] == 0
