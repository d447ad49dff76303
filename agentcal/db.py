"""Fewer round trips and less Python on the engine's write path.

`bound_cursor()`: a cursor on Django's connection and transaction that binds parameters on the server
and reads binary results. Its statements pass through `connection.execute_wrapper` hooks but not
Django's cursor wrapper (so not `connection.queries`), and are prepared unless a pooler is in front.
`InsertBatch`: several INSERTs as one statement of chained CTEs, all rows or none.

Design: docs/architecture.md, "The engine's write path"; numbers: docs/performance-notes.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from psycopg.raw_cursor import RawCursorMixin
from psycopg.types.json import Jsonb

from agentcal.json_codec import dumps_jsonb

M = TypeVar("M", bound=models.Model)


class _BinaryCursor(psycopg.Cursor[Any]):
    # The Django connection it runs on, looked up once by bound_cursor(): each use of the `connection`
    # proxy looks the thread's connection up again (~3 µs), a dozen times a write.
    database: BaseDatabaseWrapper

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        # Binary results: timestamps decoded in C, not parsed from text in Python; jsonb arrives as
        # Python objects, already what a JSONField holds (docs/performance-notes.md).
        binary = True if binary is None else binary
        wrappers = self.database.execute_wrappers
        if not wrappers:
            return psycopg.Cursor.execute(self, query, params, prepare=prepare, binary=binary)

        # Django's execute_wrapper hooks see these statements too (the statement-count tests use them).
        def run(sql: Any, sql_params: Any, many: bool, context: dict[str, Any]) -> Any:
            return psycopg.Cursor.execute(self, sql, sql_params, prepare=prepare, binary=binary)

        executor: Callable[..., Any] = run
        for wrapper in reversed(wrappers):
            executor = functools.partial(wrapper, executor)
        return executor(query, params, False, {"connection": self.database, "cursor": self})


class _RawBinaryCursor(RawCursorMixin["psycopg.Connection[Any]", Any], _BinaryCursor):
    """The same, for statements written with PostgreSQL's own `$1` placeholders: psycopg sends them as
    they are, with no client-side parse of the text (which costs ~0.3 ms for a 6 kB statement)."""


@contextmanager
def bound_cursor(*, raw: bool = False) -> Iterator[psycopg.Cursor[Any]]:
    """A server-binding, binary-result cursor on the current Django connection (see above). Database
    errors come out as Django's (IntegrityError and friends), like from `connection.cursor()`.
    `raw`: the statement's placeholders are `$1`, `$2`… and its parameters a sequence."""
    database = connections[DEFAULT_DB_ALIAS]
    database.ensure_connection()
    cursor_class = _RawBinaryCursor if raw else _BinaryCursor
    with database.wrap_database_errors, cursor_class(database.connection) as cursor:
        cursor.database = database
        yield cursor


class InsertBatch:
    """INSERTs of whole rows (given as field attname → value), sent together by `execute()`."""

    def __init__(self) -> None:
        self._tables: dict[str, tuple[type[models.Model], list[str], list[list[Any]]]] = {}

    def add(self, model: type[models.Model], values: Mapping[str, Any]) -> None:
        """Queue one row. Rows of one model must name the same fields (they share one VALUES list)."""
        table = model._meta.db_table
        names = tuple(values)
        if table not in self._tables:
            self._tables[table] = (model, list(names), [])
        _, queued_names, rows = self._tables[table]
        if tuple(queued_names) != names:
            raise ValueError(f"rows for {table} must name the same fields: {queued_names} vs {names}")
        rows.append([adapt(values[name]) for name, adapt in zip(names, _adapters(model, names), strict=True)])

    def execute(self, *, returning: type[models.Model] | None = None) -> list[int]:
        """Send every queued row in one statement; returns the new ids of `returning`'s rows in order."""
        if not self._tables:
            return []
        last = returning._meta.db_table if returning is not None else None
        order = sorted(self._tables, key=lambda table: table == last)  # the returning table goes last
        queued = [self._tables[table] for table in order]
        shape = tuple((model, tuple(names), len(rows)) for model, names, rows in queued)
        params = [value for _, _, rows in queued for row in rows for value in row]
        self._tables.clear()
        with bound_cursor(raw=True) as cursor:
            cursor.execute(_batch_sql(shape, returning is not None), params)
            return [row[0] for row in cursor.fetchall()] if returning is not None else []


@functools.lru_cache(maxsize=256)  # a shape per row count: bounded, for batches of many sizes
def _batch_sql(shape: tuple[tuple[type[models.Model], tuple[str, ...], int], ...], returning: bool) -> str:
    """The statement of a batch of this shape (model, field names, rows; the last one's ids returned),
    in PostgreSQL's own `$n` placeholders: psycopg sends it without parsing it."""
    quote = connection.ops.quote_name
    inserts, number = [], 0
    for model, names, rows in shape:
        columns = ", ".join(quote(str(_field(model, name).column)) for name in names)
        values = []
        for _ in range(rows):
            values.append("(" + ", ".join(f"${number + i}" for i in range(1, len(names) + 1)) + ")")
            number += len(names)
        inserts.append(f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES {', '.join(values)}")
    *ctes, main = inserts
    if returning:
        main += " RETURNING id"
    if not ctes:
        return main
    return "WITH " + ", ".join(f"w{i} AS ({cte})" for i, cte in enumerate(ctes)) + " " + main


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{model.__name__}.{name} is not a concrete field"
    return field


@functools.cache
def _adapters(model: type[models.Model], names: tuple[str, ...]) -> list[Callable[[Any], Any]]:
    """How each value is adapted for the database: the ORM's own preparation where it does something
    (JSON), none for the plain values psycopg adapts by itself. Cached: it runs for every row written."""
    plain = (
        models.CharField,
        models.IntegerField,
        models.BooleanField,
        models.DateTimeField,
        models.ForeignKey,
    )
    # (TextChoices members are str subclasses, which psycopg adapts as str.)
    adapters: list[Callable[[Any], Any]] = []
    for name in names:
        field = _field(model, name)
        if isinstance(field, models.JSONField):
            adapters.append(json_value)
        else:
            adapters.append(_unchanged if isinstance(field, plain) else functools.partial(_db_value, field))
    return adapters


def json_value(value: Any) -> Jsonb | None:
    """A JSON column's value as a statement parameter: what the ORM sends (None is SQL NULL), written by
    orjson (agentcal.json_codec)."""
    return None if value is None else Jsonb(value, dumps=dumps_jsonb)


def unsaved(model: type[M], **values: Any) -> M:
    """`model(**values)`: an unsaved instance with these values (by attname, or a foreign key's name with
    the related instance) and every other field's default, without Model.__init__'s generic walk of its
    arguments (the rows a write builds are made on every request). A model with pre_init or post_init
    receivers is made by Model.__init__, which sends them."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model(**values)
    fields = _fields_of(model)
    instance = object.__new__(model)
    state = instance._state = ModelState()
    attributes = instance.__dict__
    attributes.update(fields.constant_defaults)
    for name, attname, make_default in fields.made_defaults:
        if attname not in values and name not in values:
            attributes[attname] = make_default()
    for key, value in values.items():
        if key in fields.attnames:
            attributes[key] = value
        elif key in fields.related:
            attributes[fields.related[key]] = None if value is None else value.pk
            state.fields_cache[key] = value
        else:
            unknown = sorted(set(values) - fields.attnames - set(fields.related))
            raise TypeError(f"{model.__name__}() got unexpected arguments {unknown}")
    return instance


def loaded(model: type[M], attnames: Sequence[str], values: Sequence[Any]) -> M:
    """`model.from_db("default", attnames, values)`: a saved instance from a row read by its attnames (a
    field not read stays deferred), without Model.__init__'s walk of every field (the commit's moved row,
    on every commit). A model with pre_init or post_init receivers is made by from_db, which sends them."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model.from_db(DEFAULT_DB_ALIAS, attnames, values)
    instance = object.__new__(model)
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = instance._state = ModelState()
    state.adding, state.db = False, DEFAULT_DB_ALIAS
    return instance


@dataclass(frozen=True)
class _Fields:
    """What unsaved() needs of a model's concrete fields: the defaults that are the same value every
    time (None, "", or a default given as a value), those made each time (a default given as a callable,
    e.g. `default=dict`, or by the database), every attname, and each foreign key's name → attname."""

    constant_defaults: dict[str, Any]
    made_defaults: tuple[tuple[str, str, Callable[[], Any]], ...]
    attnames: frozenset[str]
    related: dict[str, str]


@functools.cache
def _fields_of(model: type[models.Model]) -> _Fields:
    constant, made = {}, []
    for field in model._meta.concrete_fields:
        if (field.has_default() and callable(field.default)) or field.has_db_default():
            made.append((field.name, field.attname, field.get_default))
        else:
            constant[field.attname] = field.get_default()
    concrete = model._meta.concrete_fields
    return _Fields(
        constant_defaults=constant,
        made_defaults=tuple(made),
        attnames=frozenset(f.attname for f in concrete),
        related={f.name: f.attname for f in concrete if f.name != f.attname},
    )


def copy_of(instance: M) -> M:
    """A shallow copy of a saved model instance (what the copy's user sets stays with it): what
    copy.copy() makes, without the pickling protocol it goes through (Model.__reduce__ and __getstate__
    were most of the copy's cost, on every request that copies a cached row)."""
    clone = object.__new__(type(instance))
    clone.__dict__ = instance.__dict__.copy()
    clone._state = ModelState()
    clone._state.db = instance._state.db
    clone._state.adding = False
    clone._state.fields_cache = dict(instance._state.fields_cache)
    return clone


def _unchanged(value: Any) -> Any:
    return value


def _db_value(field: models.Field[Any, Any], value: Any) -> Any:
    return field.get_db_prep_save(value, connection)
