"""`python -m bench [options]`: sets up Django with the project's settings, then runs the benchmark."""

from __future__ import annotations

import os
import sys

import django


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentcal.settings")
    django.setup()
    # Imported once Django is set up: the benchmark's modules import the engine's models, which need the
    # app registry ready.
    from bench.command import Command

    # Django's own command machinery: the same options, checks, errors and exit codes as a manage.py command.
    Command().run_from_argv(["python -m", "bench", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
