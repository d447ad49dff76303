"""Where an agent request's CPU goes: `python -m bench.request_cpu [--mode book|refused|me] [--requests N]`.

Calls the WSGI application in a loop in this process (no server, a warm connection) and times each
phase of the request by the thread's CPU clock, which counts the kernel's work for the thread's system
calls (a sampling profile under the interpreter lock over-weights code next to a blocking call). Phases
nest: each figure includes the phases inside it. `book`: a hold then its commit; `refused`: a hold on a
span already held (a herd's loser); `me`: `GET /v1/me`, a keyed request with no statement.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import io
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

# "module:Owner.attribute" (a class's method or property) or "module:function" as the module looks it
# up; the label is what follows the colon.
PHASES = (
    "django.core.handlers.wsgi:WSGIHandler.__call__",
    "django.core.handlers.base:BaseHandler.get_response",
    "django.core.handlers.base:BaseHandler.resolve_request",
    "django.dispatch.dispatcher:Signal.send",
    "rest_framework.views:APIView.dispatch",
    "rest_framework.views:APIView.perform_authentication",
    "rest_framework.views:APIView.perform_content_negotiation",
    "agentcal.api.views:AgentAPIView._guard",
    "agentcal.api.views:check_request_rate",
    "agentcal.api.views:AgentAPIView.finalize_response",
    "rest_framework.response:Response.rendered_content",
    "bookings.api.holds:HoldCreateView.post",
    "bookings.api.holds:validated",
    "bookings.api.commits:CommitCreateView.post",
    "bookings.engine.reserve:_reserve_in_one_statement",
    "bookings.engine.reserve:new_group",
    "bookings.engine.reserve:reserve_in_one_statement",
    "bookings.engine.transitions:reservation_group",
    "bookings.engine.transitions:_commit_in_one_statement",
    "bookings.engine.transitions:commit_in_one_statement",
    "bookings.engine.auditing:_audit_rejection",
    "agentcal.db:_BinaryCursor.execute",
)
MODES = ("book", "refused", "me")


class PhaseClock:
    """Thread CPU and calls per phase, while installed."""

    def __init__(self) -> None:
        self.nanoseconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def timed(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.nanoseconds[label] += time.thread_time_ns() - started
                self.calls[label] += 1

        return timed

    @contextmanager
    def installed(self, phases: tuple[str, ...] = PHASES) -> Iterator[None]:
        undo: list[tuple[Any, str, Any]] = []
        try:
            for phase in phases:
                module_name, _, path = phase.partition(":")
                owner: Any = importlib.import_module(module_name)
                *parents, name = path.split(".")
                for parent in parents:
                    owner = getattr(owner, parent)
                # The attribute as stored (a property, not its value), maybe on a base class.
                original = inspect.getattr_static(owner, name)
                if isinstance(original, property):
                    assert original.fget is not None
                    replacement: Any = property(self.timed(path, original.fget))
                else:
                    replacement = self.timed(path, original)
                own = not isinstance(owner, type) or name in vars(owner)
                setattr(owner, name, replacement)
                undo.append((owner, name, original if own else None))
            yield
        finally:
            for owner, name, original in reversed(undo):
                if original is None:
                    delattr(owner, name)  # it was inherited: the base class's stands again
                else:
                    setattr(owner, name, original)

    def reset(self) -> None:
        self.nanoseconds.clear()
        self.calls.clear()


def agent_request(
    application: Callable[..., Any], method: str, path: str, *, key: str, body: bytes = b""
) -> tuple[int, bytes]:
    """One agent API request (`path` under /v1) to a WSGI application in this process, its answer read
    and closed as a WSGI server does (closing is what sends Django's request_finished)."""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": f"/v1{path}",
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "HTTP_HOST": "localhost",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {key}",
        "HTTP_ACCEPT": "application/json",
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
    }
    status: list[str] = []

    def start_response(line: str, headers: list[tuple[str, str]], *_: Any) -> Callable[[bytes], object]:
        status.append(line)
        return lambda chunk: None

    answer = application(environ, start_response)
    try:
        content = b"".join(answer)
    finally:
        getattr(answer, "close", lambda: None)()
    return int(status[0][:3]), content


class Loop:
    """One agent with a calendar of its own, talking to the WSGI application in this process."""

    def __init__(self, mode: str) -> None:
        from django.core.servers.basehttp import get_internal_wsgi_application

        from bench.targets import LocalTarget

        target = LocalTarget(agents=1)
        # settings.WSGI_APPLICATION, as a server loads it: the agent API's own middleware stack.
        self.application = get_internal_wsgi_application()
        self.mode = mode
        self.calendar = target.calendar_create("request-cpu")
        self.key = target.key(0)
        self.first = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
        self.next_span = 1
        if mode == "refused":
            self.hold_span(0)

    def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        return agent_request(self.application, method, path, key=self.key, body=body)

    def hold_span(self, index: int) -> tuple[int, bytes]:
        start = self.first + timedelta(minutes=30 * index)
        body = (
            f'{{"start_time": "{start:%Y-%m-%dT%H:%M:%SZ}",'
            f' "end_time": "{start + timedelta(minutes=30):%Y-%m-%dT%H:%M:%SZ}"}}'
        )
        return self.call("POST", f"/calendars/{self.calendar}/holds", body.encode())

    def step(self) -> list[int]:
        """One step of the mode: the statuses of its requests."""
        if self.mode == "me":
            return [self.call("GET", "/me")[0]]
        if self.mode == "refused":
            return [self.hold_span(0)[0]]
        held, answer = self.hold_span(self.next_span)
        self.next_span += 1
        token = json.loads(answer)["hold_token"]
        committed, _ = self.call(
            "POST", f"/calendars/{self.calendar}/commits", f'{{"hold_token": "{token}"}}'.encode()
        )
        return [held, committed]


def measure(mode: str, requests: int, *, warmup: int = 20) -> tuple[PhaseClock, Counter[int], int]:
    """The phase clock after `requests` requests (about: a book step is two), the statuses, the count."""
    loop, clock, statuses = Loop(mode), PhaseClock(), Counter[int]()
    with clock.installed():
        for _ in range(warmup):
            loop.step()
        clock.reset()
        made = 0
        while made < requests:
            for status in loop.step():
                statuses[status] += 1
                made += 1
    return clock, statuses, made


def report(clock: PhaseClock, made: int) -> str:
    lines = [f"{'phase':<58} {'µs per request':>15} {'calls per request':>18}"]
    for label, nanoseconds in clock.nanoseconds.most_common():
        lines.append(f"{label:<58} {nanoseconds / made / 1000:>15.1f} {clock.calls[label] / made:>18.2f}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.request_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=MODES, default="book")
    parser.add_argument("--requests", type=int, default=2000)
    options = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentcal.settings")
    import django

    django.setup()
    clock, statuses, made = measure(options.mode, options.requests)
    print(report(clock, made))
    print(f"{made} requests, statuses {dict(statuses)}")


if __name__ == "__main__":
    main(sys.argv[1:])
