"""Progress bars (tqdm, on stderr): one per phase, refreshed by a ticker thread, not by the workers.

Workers only bump counters (cheap, no terminal writes on the measured path); the ticker redraws the bar
a few times a second with the elapsed time (timed phases) or rounds done (herd), and the ops count.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from tqdm import tqdm

REFRESH_SECONDS = 0.25
BAR_FORMAT = "{desc:<38} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}] {postfix}"


class Progress:
    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled

    def phase(self, title: str, *, total: float, unit: str) -> PhaseBar:
        return PhaseBar(title, total=total, unit=unit, enabled=self.enabled)

    def note(self, message: str) -> None:
        if self.enabled:
            tqdm.write(message)


class PhaseBar:
    """`unit="s"`: the bar follows the clock up to `total` seconds; otherwise it counts `advance()` calls."""

    def __init__(self, title: str, *, total: float, unit: str, enabled: bool) -> None:
        self.title = title
        self.total = total
        self.unit = unit
        self.enabled = enabled
        self.ops = 0
        self.done = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._bar: tqdm | None = None
        self._ticker: threading.Thread | None = None

    def tick(self, ops: int = 1) -> None:
        with self._lock:
            self.ops += ops

    def advance(self, steps: int = 1) -> None:
        with self._lock:
            self.done += steps

    def _refresh(self) -> None:
        assert self._bar is not None
        elapsed = time.monotonic() - self._started
        position = min(elapsed, self.total) if self.unit == "s" else min(self.done, self.total)
        self._bar.n = round(position, 1) if self.unit == "s" else int(position)
        rate = self.ops / elapsed if elapsed > 0 else 0.0
        self._bar.set_postfix_str(f"{self.ops} ops, {rate:.0f} ops/s", refresh=False)
        self._bar.refresh()

    def _tick_loop(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            self._refresh()

    def __enter__(self) -> PhaseBar:
        self._started = time.monotonic()
        if self.enabled:
            self._bar = tqdm(
                total=self.total,
                desc=self.title,
                unit=self.unit,
                dynamic_ncols=True,
                bar_format=BAR_FORMAT,
            )
            self._ticker = threading.Thread(target=self._tick_loop, daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._refresh()
            self._bar.close()
