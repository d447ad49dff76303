"""What each part of the code base may import (docs/architecture.md draws it). A new import that
crosses a layer the wrong way fails here, with the module and the import named."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
    "bench",
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
    "bench",
)

# (modules, what they must not import). Prefixes; the first rule that names a module applies.
RULES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (KERNEL, (*EVERY_APP, "agentcal.api", *COMPOSITION_ROOT)),
    (COMPOSITION_ROOT, ()),
    # The API plumbing (base view, problems, idempotency, schema) knows who is acting and audits refusals.
    (
        ("agentcal.api",),
        ("webhooks", "bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", "bench"),
    ),
    # Tenancy at the bottom: workspaces, agents, keys, the acting identity.
    (("workspaces.models", "workspaces.actor", "workspaces.keys"), ("audit", *EVERY_APP[2:], "agentcal.api")),
    (
        ("workspaces",),
        ("webhooks", "bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", "bench"),
    ),
    (("audit",), ("webhooks", "bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", "bench")),
    # Events go out through the outbox; the outbox knows nothing of what produced them.
    (("webhooks",), ("bookings", "approvals", "sync", "inboxes", "accounts", "dashboard", "bench")),
    # The engine enforces upstream busy blocks but knows nothing of how they are synced.
    (("bookings",), ("approvals", "sync", "inboxes", "accounts", "dashboard", "bench")),
    (("accounts",), ("webhooks", "bookings", "approvals", "sync", "inboxes", "dashboard", "bench")),
    (("approvals",), ("sync", "inboxes", "dashboard", "bench")),
    # Sync feeds the engine (bookings.engine.upstream), reports through audit and the outbox, and emails
    # the workspace's owners (accounts) when a link breaks.
    (("sync",), ("approvals", "inboxes", "dashboard", "bench")),
    # Inboxes receive mail for agents, link invites to the engine's holds and bookings, hold review-first
    # sends for a person's approval, and report through audit and the outbox; nothing but the
    # composition root (and the dashboard) builds on them.
    (("inboxes",), ("sync", "accounts", "dashboard", "bench")),
    (("dashboard",), ("bench", "agentcal.api")),
    (("bench",), ("dashboard", "inboxes")),
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
