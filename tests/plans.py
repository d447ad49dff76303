"""Reading PostgreSQL's plans in tests: the nodes of an EXPLAIN (FORMAT JSON) plan, the indexes it
reads, and its reads of a table that no index condition bounds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db import connection
from django.db.models import Model


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def index_names(plan: dict[str, Any]) -> set[str]:
    return {node["Index Name"] for node in nodes(plan) if "Index Name" in node}


def unbounded_reads(plan: dict[str, Any], table: str) -> list[str]:
    """The plan's reads of `table` that no index condition bounds: a scan of the whole table, or of a
    whole index (which the planner may take for small when its condition is the query's own)."""
    unbounded = []
    for node in nodes(plan):
        kind = node["Node Type"]
        if node.get("Relation Name") != table:
            continue
        if kind == "Seq Scan":
            unbounded.append(kind)
        elif kind == "Bitmap Heap Scan":
            unbounded += [
                f"{kind} through {index['Index Name']}"
                for index in bitmap_index_scans(node)
                if "Index Cond" not in index
            ]
        elif kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in node:
            unbounded.append(f"{kind} through {node['Index Name']}")
    return unbounded


def explained(sql: str) -> dict[str, Any]:
    """The plan of a statement as Django sent it (parameters bound on the client), on the test's
    connection."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        ((plan,),) = cursor.fetchall()
    return dict(plan[0]["Plan"])


def statistics_as_found_then_analyzed(*tables: str) -> Iterator[bool]:
    """The tables' statistics as they are (none yet for these rows, or an earlier test's; the suite
    empties tables with TRUNCATE, which forgets the row count), then as ANALYZE makes them."""
    yield False
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ANALYZE {table}")
    yield True


def bitmap_index_scans(heap_scan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The index scans whose bitmap a Bitmap Heap Scan reads (not those of an InitPlan run beside it)."""
    for child in heap_scan.get("Plans", ()):
        if child["Node Type"] == "Bitmap Index Scan":
            yield child
        elif child["Node Type"] in ("BitmapOr", "BitmapAnd"):
            yield from bitmap_index_scans(child)


def reads_of(plan: dict[str, Any], table: str) -> set[str]:
    """How the plan reads `table`: the indexes it goes through, and "Seq Scan" for a scan of the table."""
    read = set()
    for node in nodes(plan):
        if node.get("Relation Name") != table:
            continue
        if node["Node Type"] == "Seq Scan":
            read.add("Seq Scan")
        elif node["Node Type"] == "Bitmap Heap Scan":
            read |= {index["Index Name"] for index in bitmap_index_scans(node)}
        elif "Index Name" in node:
            read.add(node["Index Name"])
    return read


def copies(model: type[Model], source: Model, count: int, **made: str) -> None:
    """`count` copies of a row in one statement: history for a plan to find. Each column as the source
    row `r` has it, unless `made` gives an SQL expression for it in `r` and the copy's number `i`."""
    columns = [str(field.column) for field in model._meta.concrete_fields if not field.primary_key]
    names = ", ".join(f'"{column}"' for column in columns)
    # The expressions are SQL of the caller's, not parameters: a `%` in one is an operator.
    values = ", ".join(made.get(column, f'r."{column}"').replace("%", "%%") for column in columns)
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({names})"
            f" SELECT {values} FROM {table} r, generate_series(1, %s) AS i WHERE r.id = %s",
            [count, source.pk],
        )
