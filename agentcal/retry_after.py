"""The Retry-After header (RFC 9110 §10.2.3), for every outbound HTTP client (webhooks, upstream
calendars): delta-seconds or an HTTP-date, never more than a day, never negative."""

from __future__ import annotations

import email.utils
import math
import re
from datetime import UTC, datetime
from typing import Final

MAX_RETRY_AFTER_SECONDS: Final = 86400
_DELTA_SECONDS = re.compile(r"[0-9]+")


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> int | None:
    """Seconds to wait, or None if the header is absent or garbled."""
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        # Long digit strings are capped before int(): they can only mean "longer than the cap".
        seconds = int(value) if len(value) <= 6 else MAX_RETRY_AFTER_SECONDS
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)  # an HTTP-date is always GMT
        seconds = math.ceil((when - (now or datetime.now(UTC))).total_seconds())
    return max(0, min(seconds, MAX_RETRY_AFTER_SECONDS))
