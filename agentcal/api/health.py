from __future__ import annotations

import threading
import time

import redis
from django.conf import settings
from django.db import connection
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

# It takes no key, so its answer is reused for this long in each process: however many requests come, the
# dependencies are asked at most once in that time. Each answer is otherwise a new connection to Redis and a
# query, and while Redis does not answer, a second's wait: every worker held by a few keyless clients.
CHECK_REUSE_SECONDS = 2.0
_last_checks: tuple[float, dict[str, str]] | None = None  # (monotonic time it was made, the checks)
_checking = threading.Lock()


class HealthView(APIView):
    """Liveness and dependencies: 200 when PostgreSQL and Redis answer, 503 otherwise. No auth."""

    summaries = {"GET": "Check the server and its dependencies"}
    operation_ids = {"GET": "check_health"}

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict, 503: dict})
    def get(self, request: Request) -> Response:
        checks = _checks()
        healthy = all(state == "ok" for state in checks.values())
        return Response({"status": "ok" if healthy else "degraded", **checks}, status=200 if healthy else 503)


def _checks() -> dict[str, str]:
    global _last_checks
    with _checking:  # threads of one process asking at once share one check
        if _last_checks is None or time.monotonic() - _last_checks[0] >= CHECK_REUSE_SECONDS:
            checks = {"database": _check_database(), "redis": _check_redis()}
            _last_checks = (time.monotonic(), checks)
        return _last_checks[1]


def _check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # any failure is reported, not raised: this is the health endpoint
        return f"error: {type(exc).__name__}"


def _check_redis() -> str:
    try:
        client = redis.Redis.from_url(str(settings.REDIS_URL), socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        return "ok"
    except Exception as exc:
        return f"error: {type(exc).__name__}"
