#!/usr/bin/env python3
"""Zero-setup entry point: needs only Python 3.11+.

    python3 dev.py run     # install into .venv if needed, then run web + Celery worker + beat
    python3 dev.py test    # install into .venv if needed, then run the whole test suite

Without DATABASE_URL / REDIS_URL both use embedded PostgreSQL and Redis kept under .data/.
Extra arguments are passed on (e.g. `python3 dev.py test -k idempotency`).
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


def ensure_environment() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 — this file must run (and explain) on any python3
        sys.exit(f"AgentCal needs Python 3.11+; this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    print("installing dependencies (first run only)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "install", "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(wanted)


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in {"run", "test"}:
        print(__doc__)
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    ensure_environment()
    os.chdir(ROOT)
    if command == "run":
        argv = [str(PYTHON), "-m", "agentcal.cli", "run", *rest]
    else:
        argv = [str(PYTHON), "-m", "pytest", *rest]
    os.execv(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main())
