"""What each part of the code base may import (docs/architecture.md draws it). A new import that
crosses a layer the wrong way fails here, with the module and the import named."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Tools beside the product, run by hand against a deployment: nothing in the product imports them, so
# neither the web process nor the workers ever load them (the last test below runs the web process).
TOOLS = ("bench",)
# The packages held to the rules below: the product's apps, and the tools.
APPS = (
    "agentcal",
    "workspaces",
    "audit",
    "webhooks",
    "bookings",
    "approvals",
    "sync",
    "inboxes",
    "accounts",
    "dashboard",
    *TOOLS,
)

# The shared kernel: every app may use it, and it uses no app (nor the API plumbing).
KERNEL = tuple(
    f"agentcal.{name}"
    for name in (
        "errors",
        "ids",
        "text",
        "env",
        "db",
        "clock",
        "broker",
        "metrics",
        "embedded",
        "retry_after",
        "sealing",
        "rate_limits",
    )
)
# The composition root wires the apps together; nothing imports it (settings are read via django.conf).
COMPOSITION_ROOT = (
    "agentcal.settings",
    "agentcal.urls",
    "agentcal.api.urls",
    "agentcal.celery",
    "agentcal.cli",
    "agentcal.wsgi",
    "agentcal.views",
)
EVERY_APP = (
    "workspaces",
    "audit",
    "webhooks",
    "bookings",
    "approvals",
    "sync",
    "inboxes",
    "accounts",
    "dashboard",
)

# (modules, what they must not import). Prefixes; the first rule that names a module applies.
RULES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (KERNEL, (*EVERY_APP, *TOOLS, "agentcal.api", *COMPOSITION_ROOT)),
    # The composition root wires the product: the web process (agentcal.wsgi), the workers, `agentcal run`.
    (COMPOSITION_ROOT, TOOLS),
    # The API plumbing (base view, problems, idempotency, schema) knows who is acting and audits refusals.
    (
        ("agentcal.api",),
        ("webhooks", "bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", *TOOLS),
    ),
    # Tenancy at the bottom: workspaces, agents, keys, the acting identity.
    (
        ("workspaces.models", "workspaces.actor", "workspaces.keys"),
        ("audit", *EVERY_APP[2:], *TOOLS, "agentcal.api"),
    ),
    (
        ("workspaces",),
        ("webhooks", "bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", *TOOLS),
    ),
    (("audit",), ("webhooks", "bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", *TOOLS)),
    # Events go out through the outbox; the outbox knows nothing of what produced them.
    (("webhooks",), ("bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", *TOOLS)),
    # The engine enforces upstream busy blocks but knows nothing of how they are synced.
    (("bookings",), ("approvals", "sync", "inboxes", "accounts", "dashboard", *TOOLS)),
    (("accounts",), ("webhooks", "bookings", "approvals", "sync", "inboxes", "dashboard", *TOOLS)),
    (("approvals",), ("sync", "inboxes", "dashboard", *TOOLS)),
    # Sync feeds the engine (bookings.engine.upstream), reports through audit and the outbox, and emails
    # the workspace's owners (accounts) when a link breaks.
    (("sync",), ("approvals", "inboxes", "dashboard", *TOOLS)),
    # Inboxes receive mail for agents, link invites to the engine's holds and bookings, hold review-first
    # sends for a person's approval, and report through audit and the outbox; nothing but the
    # composition root (and the dashboard) builds on them.
    (("inboxes",), ("sync", "accounts", "dashboard", *TOOLS)),
    (("dashboard",), (*TOOLS, "agentcal.api")),
    # The benchmark drives the engine in-process and through HTTP; people's pages and mail are not its own.
    (TOOLS, ("dashboard", "inboxes")),
    # The rest of the project package (middleware and the like) is product too.
    (("agentcal",), TOOLS),
]
# Only an app's HTTP layer (its views, and the payloads they answer) and the composition root build on
# the HTTP API plumbing.
HTTP_LAYER = (".api", ".payloads")
API_PLUMBING_USERS = ("agentcal.api", "agentcal.urls", "agentcal.views", "agentcal.middleware")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported_modules(path: Path) -> set[str]:
    """Every absolute import in the file, at any depth (a function-level import counts too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def project_modules() -> list[Path]:
    return sorted(
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and "management" not in path.parts
    )


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def test_the_rules_cover_every_module() -> None:
    uncovered = [
        module_name(path)
        for path in project_modules()
        if not any(within(module_name(path), modules) for modules, _ in RULES)
        and not module_name(path).startswith("agentcal.")
        and module_name(path) != "agentcal"
    ]
    assert uncovered == []


@pytest.mark.parametrize("path", project_modules(), ids=lambda p: module_name(p))
def test_imports_follow_the_layers(path: Path) -> None:
    module = module_name(path)
    forbidden = next((banned for modules, banned in RULES if within(module, modules)), ())
    wrong = sorted(name for name in imported_modules(path) if within(name, forbidden))
    if not module.endswith(HTTP_LAYER) and not within(module, API_PLUMBING_USERS):
        wrong += sorted(name for name in imported_modules(path) if within(name, ("agentcal.api",)))
    assert wrong == [], f"{module} may not import {wrong}"


# --- Nothing session-scoped: PgBouncer in transaction mode (docs/scaling.md) -------------------------------
# Behind a transaction-mode pooler a server connection is lent for one transaction, so session state set in
# one transaction is gone in the next (or, worse, left for another client). Forbidden in SQL (string
# literals, docstrings aside) and in psycopg calls; the transaction-scoped forms are the way.
SESSION_SCOPED_SQL = [
    (re.compile(r"pg_(try_)?advisory_(un)?lock(_shared)?\s*\(", re.I), "pg_advisory_xact_lock"),
    (re.compile(r"(^|;)\s*SET\s+(?!LOCAL\b|TRANSACTION\b|CONSTRAINTS\b)"), "SET LOCAL"),
    (re.compile(r"(^|;)\s*(RESET|DISCARD|LISTEN|UNLISTEN|NOTIFY|PREPARE)\s"), "no session state"),
    (re.compile(r"pg_notify\s*\(", re.I), "the outbox (webhooks.outbox) instead of NOTIFY"),
    (re.compile(r"CREATE\s+((GLOBAL|LOCAL)\s+)?TEMP(ORARY)?\s+TABLE", re.I), "a CTE or a real table"),
    (re.compile(r"\bWITH\s+HOLD\b"), "a cursor inside the transaction"),
    (re.compile(r"set_config\s*\([^)]*,\s*false\s*\)", re.I), "set_config(..., true)"),
]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def session_scoped_uses(source: str) -> list[str]:
    """What in this source would rely on a database session, each with the form to use instead."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [
                f"line {node.lineno}: {node.value.strip()[:60]!r} (use {instead})"
                for pattern, instead in SESSION_SCOPED_SQL
                if pattern.search(node.value)
            ]
        elif isinstance(node, ast.keyword) and node.arg in ("prepare", "withhold") and _is(node.value, True):
            found.append(f"line {node.value.lineno}: {node.arg}=True")
        elif isinstance(node, ast.keyword) and node.arg == "prepare_threshold" and _is_number(node.value):
            # A literal number prepares always; an expression may consult the pooler setting.
            found.append(f"line {node.value.lineno}: prepare_threshold other than None")
        elif isinstance(node, ast.Dict):
            found += [
                f"line {key.lineno}: prepare_threshold other than None"
                for key, value in zip(node.keys, node.values, strict=True)
                if key is not None and _is(key, "prepare_threshold") and _is_number(value)
            ]
        elif (
            isinstance(node, ast.Call)
            and _is_psycopg_connect(node.func)
            and not any(keyword.arg == "prepare_threshold" for keyword in node.keywords)
        ):
            # psycopg prepares a statement on its 5th execution unless told not to.
            found.append(f"line {node.lineno}: psycopg.connect() without prepare_threshold=None")
    return found


def _is(node: ast.expr, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value == value and type(node.value) is type(value)


def _is_number(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _is_psycopg_connect(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "connect"
        and isinstance(func.value, ast.Name | ast.Attribute)
        and ast.unparse(func.value) in ("psycopg", "psycopg.Connection")
    )


def every_module() -> list[Path]:
    """Product code, migrations and management commands included (they run through the pooler too)."""
    return sorted(path for app in APPS for path in (ROOT / app).rglob("*.py"))


# Connections that never go through a pooler: the embedded PostgreSQL's start-up check (two statements).
NEVER_POOLED = ("agentcal.embedded",)


@pytest.mark.parametrize("path", every_module(), ids=lambda p: module_name(p))
def test_nothing_relies_on_a_database_session(path: Path) -> None:
    found = session_scoped_uses(path.read_text())
    if module_name(path) in NEVER_POOLED:
        found = [use for use in found if "psycopg.connect()" not in use]
    assert found == [], module_name(path)


@pytest.mark.parametrize(
    "snippet",
    [
        'cursor.execute("SELECT pg_advisory_lock(%s)", [key])',
        'cursor.execute("select pg_try_advisory_lock(1)")',
        'cursor.execute("SELECT pg_advisory_unlock(%s)", [key])',
        "cursor.execute(\"SET statement_timeout = '5s'\")",
        'cursor.execute("SET SESSION lock_timeout TO 100")',
        "cursor.execute(\"BEGIN; SET TIME ZONE 'UTC'\")",
        'cursor.execute("LISTEN bookings")',
        "cursor.execute(\"SELECT pg_notify('bookings', '1')\")",
        'cursor.execute("CREATE TEMP TABLE seen (id int)")',
        'cursor.execute("DECLARE c CURSOR WITH HOLD FOR SELECT 1")',
        "cursor.execute(\"SELECT set_config('app.user', %s, false)\", [u])",
        'conn.execute("SELECT 1", prepare=True)',
        "psycopg.connect(url)",
        "psycopg.connect(url, prepare_threshold=5)",
        'OPTIONS = {"prepare_threshold": 0}',
    ],
)
def test_the_session_check_finds_each_form(snippet: str) -> None:
    assert session_scoped_uses(snippet) != []


def test_the_session_check_leaves_the_transaction_scoped_forms_alone() -> None:
    source = '''
def f():
    """Takes pg_advisory_lock-free paths; SET nothing."""
    cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [1, "x"])
    cursor.execute("SET LOCAL agentcal.audit_purge = 'on'")
    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    cursor.execute("UPDATE t SET x = 1 WHERE id = %s", [1])
    cursor.execute("SELECT set_config('app.user', %s, true)", [u])
    psycopg.connect(url, prepare_threshold=None)
    conn.execute(sql, params, prepare=self.prepare)
'''
    assert session_scoped_uses(source) == []


# --- The web process loads no tool --------------------------------------------------------------------------
# What gunicorn loads (`agentcal run` serves agentcal.wsgi:application): the settings' installed apps, then
# every view module through the URLconf, as the first request would. The import rules above cover what the
# code imports; this covers what Django loads by configuration (INSTALLED_APPS, URLconf, middleware).
WEB_PROCESS = """
import sys

import agentcal.wsgi
from django.urls import get_resolver

get_resolver().url_patterns
print("\\n".join(sorted(sys.modules)))
"""


def test_the_web_process_loads_nothing_from_the_benchmark() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WEB_PROCESS],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert {"agentcal.wsgi", "bookings.engine", "dashboard.urls"} <= set(loaded)
    assert [name for name in loaded if within(name, TOOLS)] == []
