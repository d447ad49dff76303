"""Messages name their task (agentcal.broker): every name the code hands to the broker, to Celery or to
beat is a registered task that takes the arguments given, so a misspelt name fails here rather than as a
message no worker accepts. Every task's name is explicit: a generated one changes when its module moves,
and messages already queued under the old name would find no task."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from agentcal.celery import app as celery_app
from tests.test_architecture import ROOT, module_name, project_modules

# The broker's functions that take a task name first, and Celery's own by-name ones.
BROKER_FUNCTIONS = {"nudge", "nudge_on_commit", "enqueue", "enqueue_on_commit"}
CELERY_FUNCTIONS = {"send_task", "signature"}


@dataclass(frozen=True)
class NamedTask:
    where: str
    name: str
    arg_count: int | None  # None when the call's arguments are not literal


def _arg_count(call: ast.Call) -> int | None:
    function = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    if function.startswith("nudge"):
        return 1 if any(keyword.arg == "items" for keyword in call.keywords) else 0
    args = call.args[1] if len(call.args) > 1 else None
    args = next((keyword.value for keyword in call.keywords if keyword.arg == "args"), args)
    if args is None:
        return 0
    return len(args.elts) if isinstance(args, ast.Tuple | ast.List) else None


def named_tasks(source: str, module: str) -> list[NamedTask]:
    """Every call in the source that names a task with a string: the broker's, and Celery's by-name ones."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        by_broker = (
            node.func.attr in BROKER_FUNCTIONS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "broker"
        )
        name = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
        if isinstance(name, str) and (by_broker or node.func.attr in CELERY_FUNCTIONS):
            found.append(NamedTask(f"{module}:{node.lineno}", name, _arg_count(node)))
    return found


def registered_tasks() -> dict[str, object]:
    celery_app.autodiscover_tasks(force=True)  # what a worker imports at start
    return dict(celery_app.tasks)


def mistakes(uses: list[NamedTask]) -> list[str]:
    tasks = registered_tasks()
    wrong = []
    for use in uses:
        task = tasks.get(use.name)
        if task is None:
            wrong.append(f"{use.where}: no task is registered as {use.name!r}")
            continue
        if use.arg_count is not None:
            try:
                inspect.signature(task.run).bind(*[None] * use.arg_count)  # type: ignore[attr-defined]
            except TypeError as exc:
                wrong.append(f"{use.where}: {use.name} with {use.arg_count} argument(s): {exc}")
    return wrong


def product_uses() -> list[NamedTask]:
    return [use for path in project_modules() for use in named_tasks(path.read_text(), module_name(path))]


def test_every_task_name_given_to_the_broker_is_a_registered_task_taking_those_arguments() -> None:
    uses = product_uses()
    # The scan finds what is there (an empty scan would pass whatever the code says).
    assert {"webhooks.dispatch_outbox", "webhooks.replay", "approvals.notify_owners"} <= {
        u.name for u in uses
    }
    assert mistakes(uses) == []


def test_it_fails_on_a_misspelt_task_name_and_on_a_wrong_number_of_arguments() -> None:
    source = textwrap.dedent(
        """
        broker.enqueue_on_commit("webhooks.replai", (1,), fallback=broker.RUN_HERE)
        broker.enqueue_on_commit("webhooks.replay", (1, 2), fallback=None)
        broker.nudge_on_commit("webhooks.dispatch_outbox", items=[1])
        celery_app.send_task("approvals.notify_owner", (1,))
        """
    )
    assert mistakes(named_tasks(source, "example")) == [
        "example:2: no task is registered as 'webhooks.replai'",
        "example:3: webhooks.replay with 2 argument(s): too many positional arguments",
        "example:4: webhooks.dispatch_outbox with 1 argument(s): too many positional arguments",
        "example:5: no task is registered as 'approvals.notify_owner'",
    ]


def test_every_task_beat_sends_is_registered() -> None:
    tasks = registered_tasks()
    unknown = {key: entry["task"] for key, entry in settings.CELERY_BEAT_SCHEDULE.items()}
    assert {key: name for key, name in unknown.items() if name not in tasks} == {}


def _task_decorators(path: Path) -> list[ast.Call | ast.expr]:
    found: list[ast.Call | ast.expr] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                called = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(called, ast.Name | ast.Attribute) and ast.unparse(called).endswith(
                    ("shared_task", "app.task")
                ):
                    found.append(decorator)
    return found


TASKS_MODULES = [path for path in project_modules() if path.name == "tasks.py"]


@pytest.mark.parametrize("path", TASKS_MODULES, ids=module_name)
def test_every_task_has_an_explicit_name_under_its_app(path: Path) -> None:
    module = module_name(path)
    app = module.split(".")[0]
    for decorator in _task_decorators(path):
        name = next((k.value for k in getattr(decorator, "keywords", []) if k.arg == "name"), None)
        assert isinstance(name, ast.Constant), f"{module}:{decorator.lineno}: a task without name="
        assert str(name.value).startswith(f"{app}."), f"{module}: {name.value!r} is not under {app}."


def test_a_process_that_never_imported_a_tasks_module_finds_the_task_by_name() -> None:
    # A web process publishes by name and imports no tasks module; running a task here (the RUN_HERE
    # fallback when the broker refuses its message) has to find it all the same.
    script = textwrap.dedent(
        """
        import django
        django.setup()
        from celery import current_app
        from agentcal import broker
        assert "webhooks.replay" not in current_app.tasks, "already imported: this would prove nothing"
        print(broker.registered_task("webhooks.replay").name)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentcal.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "webhooks.replay"
