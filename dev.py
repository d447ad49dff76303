#!/usr/bin/env python3
"""Zero-setup entry point: needs only Python 3.11+.

    python3 dev.py run     # install into .venv if needed, then run web + Celery worker + beat
    python3 dev.py test    # install into .venv if needed, then run the whole test suite
    python3 dev.py manage  # install into .venv if needed, then a manage.py command (create_owner, ...)
    python3 dev.py bench   # install into .venv if needed, then the benchmark (python -m bench)
    python3 dev.py lint    # install into .venv if needed, then ruff check, ruff format --check and mypy

Without DATABASE_URL / REDIS_URL / SECRET_KEY, run, test, manage and bench start (or join) an embedded
PostgreSQL and Redis kept under .data/ and use a key generated there (agentcal/embedded.py). Extra arguments
are passed on (e.g. `python3 dev.py test -k idempotency`). The suite runs in parallel worker processes;
`-n0` runs it in one process, `-m fuzz` / `-m bench` add the opt-in sets.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("AGENTCAL_VENV", ROOT / ".venv"))
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".agentcal-installed"
# The client libraries and the MCP server built on them (their own distributions, not the server's
# dependencies), installed editable so the suite (tests/clients) tests them as they are in the tree.
CLIENTS = ("clients/python", "clients/mcp")


def ensure_environment() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 — this file must run (and explain) on any python3
        sys.exit(f"AgentCal needs Python 3.11+; this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    # Reinstall whenever any of the projects' pyproject.toml changes (their dependencies may have).
    wanted = hashlib.sha256(
        b"".join((ROOT / project / "pyproject.toml").read_bytes() for project in (".", *CLIENTS))
    ).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    print("installing dependencies (first run only)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    editable_clients = [arg for client in CLIENTS for arg in ("-e", str(ROOT / client))]
    subprocess.run([*pip, "install", "-e", f"{ROOT}[dev]", *editable_clients], check=True)
    STAMP.write_text(wanted)


def lint() -> int:
    """Run every check (all of them, so one run shows every finding); non-zero if any failed."""
    # mypy's Django plugin imports the settings, which refuse to load without these; importing them
    # never connects, so any well-formed values will do.
    mypy_env = {
        **os.environ,
        "DATABASE_URL": "postgresql://localhost/x",
        "REDIS_URL": "redis://localhost:6379/0",
        "SECRET_KEY": "mypy-only",
    }
    checks = [
        ([str(PYTHON), "-m", "ruff", "check", "."], None),
        ([str(PYTHON), "-m", "ruff", "format", "--check", "."], None),
        ([str(PYTHON), "-m", "mypy", "."], mypy_env),
    ]
    failed = []
    for argv, env in checks:
        print(f"== {' '.join(argv[2:])}", flush=True)
        if subprocess.run(argv, cwd=ROOT, env=env).returncode != 0:
            failed.append(" ".join(argv[2:]))
    if failed:
        print(f"lint failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    command, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    # lint checks everything, so it takes no arguments
    if command not in {"run", "test", "manage", "bench", "lint"} or (command == "lint" and rest):
        print(__doc__)
        return 2
    ensure_environment()
    os.chdir(ROOT)
    if command == "lint":
        return lint()
    if command == "run":
        argv = [str(PYTHON), "-m", "agentcal.cli", "run", *rest]
    elif command == "manage":
        argv = [str(PYTHON), str(ROOT / "manage.py"), *rest]
    elif command == "bench":
        argv = [str(PYTHON), "-m", "bench", *rest]
    else:
        # The suite runs in several worker processes, each importing (and pytest rewriting) every module:
        # cached bytecode saves each of them that, so a setting that turns the cache off is dropped here.
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        argv = [str(PYTHON), "-m", "pytest", *rest]
    # The settings start nothing: this process (in the venv) provides what is unset, then runs the command.
    launcher = [str(PYTHON), "-m", "agentcal.embedded"]
    os.execv(launcher[0], [*launcher, *argv])


if __name__ == "__main__":
    sys.exit(main())
