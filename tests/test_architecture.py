"""What each part of the code base may import (docs/architecture.md draws it). A new import that
crosses a layer the wrong way fails here, with the module and the import named."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

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
    "guardrails",
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
        "shared_buckets",
        "sizing",
    )
)
# The composition root wires the apps together; nothing imports it (settings are read via django.conf).
COMPOSITION_ROOT = (
    "agentcal.settings",
    "agentcal.urls",
    "agentcal.api.urls",
    "agentcal.api.event_catalog",
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
    "guardrails",
    "dashboard",
)


class Rule(NamedTuple):
    part: str  # as docs/architecture.md names it
    modules: tuple[str, ...]  # module prefixes it covers
    forbidden: tuple[str, ...]  # module prefixes they must not import
    why: str


# The parts named in docs/architecture.md's table, by the module prefixes that make them up.
PARTS: dict[str, tuple[str, ...]] = {
    "kernel": KERNEL,
    "workspaces": ("workspaces",),
    "audit": ("audit",),
    "webhooks": ("webhooks",),
    "bookings": ("bookings",),
    "accounts": ("accounts",),
    "approvals": ("approvals",),
    "sync": ("sync",),
    "inboxes": ("inboxes",),
    "guardrails": ("guardrails",),
    "dashboard": ("dashboard",),
    "agentcal.api": ("agentcal.api",),
    "composition root": COMPOSITION_ROOT,
    "bench": TOOLS,
}
# Nothing in an app imports what wires the apps together (settings are read through django.conf), nor a tool.
ABOVE_EVERY_APP = (*COMPOSITION_ROOT, *TOOLS)
APPS_ABOVE_AUDIT = (
    "webhooks",
    "bookings",
    "approvals",
    "sync",
    "inboxes",
    "accounts",
    "guardrails",
    "dashboard",
)

# What each part must not import. Prefixes; the first rule that names a module applies.
RULES: list[Rule] = [
    Rule(
        "kernel",
        KERNEL,
        (*EVERY_APP, *ABOVE_EVERY_APP, "agentcal.api"),
        "every app uses it; it knows no app",
    ),
    Rule(
        "composition root",
        COMPOSITION_ROOT,
        TOOLS,
        "settings, URLs, Celery app, CLI: it wires the product (the web process, the workers, "
        "`agentcal run`)",
    ),
    Rule(
        "agentcal.api",
        ("agentcal.api",),
        (*APPS_ABOVE_AUDIT, *ABOVE_EVERY_APP),
        "the API plumbing (base view, problems, idempotency, schema) knows who is acting and audits refusals",
    ),
    Rule(
        "workspaces (models, actor, keys)",
        ("workspaces.models", "workspaces.actor", "workspaces.keys"),
        ("audit", *EVERY_APP[2:], *ABOVE_EVERY_APP, "agentcal.api"),
        "who is acting is the bottom of everything",
    ),
    Rule(
        "workspaces (agent and key admin)",
        ("workspaces",),
        (*APPS_ABOVE_AUDIT, *ABOVE_EVERY_APP),
        "admin actions are audited",
    ),
    Rule(
        "audit",
        ("audit",),
        (*APPS_ABOVE_AUDIT, *ABOVE_EVERY_APP),
        "every change and refusal is recorded with its actor",
    ),
    Rule(
        "webhooks",
        ("webhooks",),
        ("bookings", "approvals", "sync", "inboxes", "accounts", "guardrails", "dashboard", *ABOVE_EVERY_APP),
        "events go out through the outbox, which knows nothing of what produced them",
    ),
    Rule(
        "bookings",
        ("bookings",),
        ("approvals", "sync", "inboxes", "accounts", "guardrails", "dashboard", *ABOVE_EVERY_APP),
        "the engine writes reservations, audit rows and outbox events in one transaction; it enforces "
        "upstream busy blocks but knows nothing of how they are synced",
    ),
    Rule(
        "accounts",
        ("accounts",),
        ("webhooks", "bookings", "approvals", "sync", "inboxes", "guardrails", "dashboard", *ABOVE_EVERY_APP),
        "people sign in; they belong to workspaces",
    ),
    Rule(
        "approvals",
        ("approvals",),
        ("sync", "inboxes", "guardrails", "dashboard", *ABOVE_EVERY_APP),
        "an approved hold is committed by the engine; owners are told by mail",
    ),
    Rule(
        "sync",
        ("sync",),
        ("approvals", "inboxes", "guardrails", "dashboard", *ABOVE_EVERY_APP),
        "feeds the engine upstream busy time (`bookings.engine.upstream`), reports through audit and the "
        "outbox, and emails the workspace's owners when a link breaks",
    ),
    Rule(
        "inboxes",
        ("inboxes",),
        ("sync", "accounts", "guardrails", "dashboard", *ABOVE_EVERY_APP),
        "agents' mailboxes: link invites to the engine's holds and bookings, hold review-first sends for a "
        "person's approval, report through audit and the outbox; nothing but the composition root and the "
        "dashboard builds on them",
    ),
    Rule(
        "guardrails",
        ("guardrails",),
        ("approvals", "sync", "inboxes", "dashboard", *ABOVE_EVERY_APP),
        "owners keep a fleet in check: pause agents (releasing their holds through the engine, told "
        "through the outbox), set their limits, are emailed when one is met; the request path's checks "
        "live in `workspaces.limits`",
    ),
    Rule(
        "dashboard",
        ("dashboard",),
        (*ABOVE_EVERY_APP, "agentcal.api"),
        "pages for people, on the same services as the API",
    ),
    Rule(
        "bench",
        TOOLS,
        ("dashboard", "inboxes", "guardrails", *COMPOSITION_ROOT),
        "a tool beside the product (`python -m bench`): drives the engine in-process and through HTTP; "
        "nothing in the product imports it, so the web process and the workers never load it",
    ),
    Rule("the rest of `agentcal`", ("agentcal",), TOOLS, "middleware and the like: product too"),
]

# Only an app's HTTP layer (its views, a module or a package, and the payloads they answer) and the
# composition root build on the HTTP API plumbing.
HTTP_LAYER = ("api", "payloads")
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
        if not any(within(module_name(path), rule.modules) for rule in RULES)
        and not module_name(path).startswith("agentcal.")
        and module_name(path) != "agentcal"
    ]
    assert uncovered == []


@pytest.mark.parametrize("path", project_modules(), ids=lambda p: module_name(p))
def test_imports_follow_the_layers(path: Path) -> None:
    module = module_name(path)
    forbidden = next((rule.forbidden for rule in RULES if within(module, rule.modules)), ())
    wrong = sorted(name for name in imported_modules(path) if within(name, forbidden))
    in_http_layer = any(part in HTTP_LAYER for part in module.split(".")[1:])
    if not in_http_layer and not within(module, API_PLUMBING_USERS):
        wrong += sorted(name for name in imported_modules(path) if within(name, ("agentcal.api",)))
    assert wrong == [], f"{module} may not import {wrong}"


def test_writers_never_import_the_workers() -> None:
    """Work is enqueued by task name (agentcal.broker): no module imports a tasks module, so code that
    records a change never pulls in (or circles back through) the code that does the work."""
    importing = {
        module_name(path): sorted(name for name in imported_modules(path) if name.split(".")[-1] == "tasks")
        for path in project_modules()
    }
    assert {module: names for module, names in importing.items() if names} == {}


# --- docs/architecture.md's table is these rules, rendered -------------------------------------------------
ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
TABLE_BEGIN = "<!-- The rules table below is rendered from tests/test_architecture.py's RULES. -->"
TABLE_END = "<!-- End of the rules table. -->"


def _is_part_of(modules: tuple[str, ...], prefixes: tuple[str, ...]) -> bool:
    return all(within(module, prefixes) for module in modules)


def rules_table() -> str:
    """The table as docs/architecture.md must show it: what each part may import, and why."""
    rows = ["| part | modules | may import | why |", "|---|---|---|---|"]
    for rule in RULES:
        allowed = [
            f"`{name}`" if "." in name else name
            for name, prefixes in PARTS.items()
            if name != "agentcal.api"  # only the HTTP layer may (the row after this table)
            and not _is_part_of(rule.modules, prefixes)
            and not any(within(prefix, rule.forbidden) for prefix in prefixes)
        ]
        modules = ", ".join(f"`{module}`" for module in rule.modules)
        rows.append(
            f"| {rule.part} | {modules} | {', '.join(allowed) or 'Django and libraries'} | {rule.why} |"
        )
    layer = " and ".join(f"`<app>.{name}`" for name in HTTP_LAYER)
    plumbing = ", ".join(f"`{module}`" for module in API_PLUMBING_USERS)
    rows.append(
        f"| an app's HTTP layer | {layer}; {plumbing} | its app's rule, and `agentcal.api` | "
        "views parse, call a service, render; nothing else builds on the HTTP plumbing |"
    )
    return "\n".join(rows)


def test_the_architecture_doc_shows_the_enforced_rules() -> None:
    text = ARCHITECTURE_DOC.read_text()
    shown = text.split(TABLE_BEGIN, 1)[-1].split(TABLE_END, 1)[0].strip()
    assert TABLE_BEGIN in text and TABLE_END in text, f"mark the table in {ARCHITECTURE_DOC.name}"
    assert shown == rules_table(), f"docs/architecture.md's table should read:\n{rules_table()}"


def test_the_architecture_drawing_names_every_part() -> None:
    drawing = ARCHITECTURE_DOC.read_text().split("```", 2)[1]
    missing = [
        name for name in (*EVERY_APP, "composition root", "agentcal.api", "kernel") if name not in drawing
    ]
    assert missing == []


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


# --- Tests import nothing from a conftest -------------------------------------------------------------------
# pytest imports each conftest.py itself; a test that imports one again registers its fixtures a second
# time wherever it is imported (pytest advises against it). Helpers live in tests/<dir>/helpers.py; fixtures
# that other directories use in tests/<dir>/fixtures.py, which tests/conftest.py lists in pytest_plugins.


def conftest_imports(source: str) -> list[str]:
    """Each import of a conftest module in the source, at any depth, relative ones too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.rsplit(".", 1)[-1] == "conftest"]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [alias.name for alias in node.names]
            if module.rsplit(".", 1)[-1] == "conftest" or "conftest" in names:
                found.append(f"from {module} import {', '.join(names)}")
    return found


def test_no_test_imports_from_a_conftest() -> None:
    found = {
        str(path.relative_to(ROOT)): uses
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (uses := conftest_imports(path.read_text()))
    }
    assert found == {}


@pytest.mark.parametrize(
    "snippet",
    [
        "from tests.webhooks.conftest import wait_until",
        "from tests.sync import conftest as caldav_fixtures",
        "import tests.conftest",
        "from .conftest import mail",
        "from . import conftest",
        "def f():\n    from tests.inboxes.conftest import deliver_raw\n",
    ],
)
def test_the_conftest_check_finds_each_form(snippet: str) -> None:
    assert conftest_imports(snippet) != []


def test_the_conftest_check_leaves_helpers_and_fixtures_modules_alone() -> None:
    source = "from tests.webhooks.helpers import wait_until\nimport tests.sync.fixtures\n"
    assert conftest_imports(source) == []


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
