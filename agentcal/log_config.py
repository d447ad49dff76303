"""The logging configuration the settings install (`LOGGING`): plain lines on the console."""

from __future__ import annotations

from typing import Any


def logging_config(*, level: str | None, request_level: str | None) -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "root": {"handlers": ["console"], "level": level},
        # Django logs every 4xx answer as a warning: for the agent API that is a line per refused request
        # (each loser of a herd), all of them answered as documented and audited. Server errors are still
        # logged; a request level of WARNING brings the 4xx lines back.
        "loggers": {"django.request": {"level": request_level}},
    }
