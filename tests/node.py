"""Node projects the tests drive (the TypeScript client, clients generated from the schema, other
ecosystems' SDKs): each folder with a package.json is installed from its committed package-lock.json by
`npm ci`, once per lock file however many test processes ask, into that folder's own node_modules.

Without Node on the machine these tests skip with the reason; CI machines have it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_STAMP = ".installed-from-lock"


def require_node() -> tuple[str, str]:
    """The paths of `node` and `npm`, or skip the calling test."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are not installed (these tests run another ecosystem's client)")
    return node, npm


def npm_ci(folder: Path) -> Path:
    """`folder` installed from its lock file (a no-op when node_modules already matches it)."""
    _, npm = require_node()
    lock = folder / "package-lock.json"
    wanted = hashlib.sha256(lock.read_bytes()).hexdigest()
    modules = folder / "node_modules"
    stamp = modules / _STAMP
    with open(folder / ".npm-ci.lock", "w") as mutex:  # xdist workers install one at a time
        fcntl.flock(mutex, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == wanted:
            return modules
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=folder,
            check=True,
            timeout=600,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )
        stamp.write_text(wanted)
    return modules


def node_bin(folder: Path, name: str) -> str:
    """A command a Node project installed (`node_modules/.bin/<name>`)."""
    return str(npm_ci(folder) / ".bin" / name)
