"""ORM expressions that keep PostgreSQL's planner on the index a read is meant to use, whatever the
tables' statistics say (a new installation's tables have none; docs/performance-notes.md, "Periodic
work: bounded by what is due"). The engine's hand-written SQL has its twins in bookings/sql.py."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Func, Lookup


class Unindexed(Func):
    """A condition in a form the planner cannot match to a partial index's condition (in a WHERE clause,
    `(…) IS TRUE` selects the same rows). SQL twin: bookings.sql.unindexed()."""

    template = "(%(expressions)s) IS TRUE"
    output_field = models.BooleanField()


class InArray(Lookup):
    """`lhs = ANY(ARRAY(subquery))`: the subquery is read once, on its own, and each value looked up in an
    index, where the planner may turn `IN (subquery)` into a join in either direction (or, beside an OR,
    check it against every row)."""

    lookup_name = "in_array"

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY(ARRAY{rhs})", (*lhs_params, *rhs_params)
