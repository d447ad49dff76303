"""Helpers for tests that watch webhooks and background work: the receiver's records, polling."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; answers with the queued status codes, then with `default_status`."""

    url: str
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    default_status: int = 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.05)
        raise AssertionError(f"expected {count} webhook request(s), got {len(self.requests)}")

    def of_type(self, event_type: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.json["type"] == event_type]


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")
