"""A test run needs no configured SECRET_KEY: the settings refuse to load without one, so one is made
up here for this run, before they load (`-p tests.environment`, pyproject's addopts).

Set in the controller's environment, it reaches the xdist workers and every server a test starts
(gunicorn, Celery, the SMTP listener), so they all sign and verify with the same key. DATABASE_URL and
REDIS_URL are not made up: they name real servers (`python3 dev.py test` starts the embedded ones).
"""

from __future__ import annotations

import os
import secrets

if not (os.environ.get("SECRET_KEY") or os.environ.get("SECRET_KEY_FILE")):
    os.environ["SECRET_KEY"] = "tests-" + secrets.token_urlsafe(32)
